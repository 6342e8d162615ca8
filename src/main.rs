//! The `hyoka` command line. It parses arguments, calls the library and maps failures to exit
//! codes; no tensor or scoring code lives here.

use hyoka::cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    end_quietly_when_the_reader_goes();
    hyoka::heap::keep_freed_memory();
    ExitCode::from(cli::main_with(std::env::args_os()))
}

/// `hyoka validate --json F | head`: when the reader of stdout goes away, end as Unix tools do
/// (killed by SIGPIPE, nothing printed) instead of panicking on the failed write. Rust ignores
/// SIGPIPE by default; sockets are unaffected (the standard library sends with MSG_NOSIGNAL).
fn end_quietly_when_the_reader_goes() {
    #[cfg(unix)]
    // SAFETY: restoring a signal's default disposition at start-up, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
