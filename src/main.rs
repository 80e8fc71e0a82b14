fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(runner::cli::main() as u8)
}
