fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // `runner __sandbox ...` is the supervisor every bash call runs under, not a command.
    if args.get(1).is_some_and(|a| {
        a == runner::sandbox::supervisor::ARG || a == runner::sandbox::supervisor::CONFINE_ARG
    }) {
        let code = runner::sandbox::supervisor::main(args);
        return std::process::ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX));
    }
    runner::sandbox::close_inherited_fds();
    std::process::ExitCode::from(runner::main().code())
}
