//! The `hyoka` command line. It parses arguments, calls the library and maps failures to exit
//! codes; no tensor or scoring code lives here.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    hyoka::heap::keep_freed_memory();
    let args = cli::parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit());
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(cli::exit_code(&err))
        }
    }
}
