//! The `mfsched` command line: thin, it parses arguments and calls the library.

mod cli;
mod logging;

fn main() -> std::process::ExitCode {
    cli::main()
}
