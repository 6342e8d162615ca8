//! The `hyoka` command line. It parses arguments, calls the library and maps failures to exit
//! codes; no tensor or scoring code lives here.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    keep_freed_memory();
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(cli::exit_code(&err))
        }
    }
}

/// glibc hands freed blocks above 128 kB back to the kernel and maps them again for the next
/// batch, so every batch-sized activation was page-faulted and zeroed anew (sys time 2.9 s of
/// a 18 s BERTScore run on 2 cores, 0.8 s with this). Here no block is mapped on its own (a
/// threshold cannot keep blocks over 32 MB in the heap; a 1,615-token prompt's MLP activations
/// of an 8B model are 92 MB — heap-only took Qwen 0.5B's batched prefill from 129 to 163 tok/s
/// at the same peak RSS), and the heap is not trimmed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory() {
    unsafe extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_MMAP_MAX: i32 = -4;
    // Safety: mallopt only changes glibc's allocator settings, here before any thread starts.
    unsafe {
        mallopt(M_TRIM_THRESHOLD, i32::MAX);
        mallopt(M_MMAP_MAX, 0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_freed_memory() {}
