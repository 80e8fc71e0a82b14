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
    return_large_blocks();
    std::process::ExitCode::from(runner::main().code())
}

/// Large blocks (tool outputs, request tails: hundreds of kB each, made and dropped every turn)
/// go back to the system when freed. glibc would otherwise raise its thresholds as they come
/// and go and keep them in per-thread free lists, which a long step with big tool outputs pays
/// for in peak memory. Fixing the trim threshold also fixes the mmap threshold at its default
/// (128 kB): blocks that large are mapped and unmapped on their own. The free top of a heap is
/// kept up to 1 MB: giving back every 128 kB, as before, made each turn of a long step fault
/// its pages back in (a tenth of a 300-turn step's time), for no lower peak (docs/src/performance.md).
fn return_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const THRESHOLD: nix::libc::c_int = 1024 * 1024;
        // SAFETY: mallopt only sets allocator parameters; called before any other thread.
        unsafe {
            nix::libc::mallopt(nix::libc::M_TRIM_THRESHOLD, THRESHOLD);
        }
    }
}
