//! engine-compare: wodfs-engine against redb and fjall under one memory
//! limit. See README.md beside this crate for what is measured and how.

mod cgroup;
mod child;
mod cli;
mod data;
mod engine;
mod fjall_engine;
mod harness;
#[cfg(feature = "heap-count")]
mod heap_count;
mod redb_engine;
mod report;
mod scratch;
mod signals;
#[cfg(feature = "wodfs")]
mod wodfs_engine;
mod workload;

use std::process::ExitCode;

use cli::Invocation;

fn main() -> ExitCode {
    let invocation = match cli::parse(std::env::args().skip(1)) {
        Ok(invocation) => invocation,
        Err(e) => {
            eprintln!("engine-compare: {e:#}\n\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    let outcome = match invocation {
        Invocation::Help => {
            print!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Invocation::Child(request) => {
            #[cfg(feature = "heap-count")]
            heap_count::start_reporting();
            child::main(&request).map(|()| true)
        }
        Invocation::Run(options) => harness::main(&options),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("engine-compare: {e:#}");
            ExitCode::FAILURE
        }
    }
}
