//! `accord run`'s command, kept from outliving accord.
//!
//! - The command runs in a process group of its own (it is the group's leader), so that the
//!   processes it starts are reached too. Whichever way `accord run` ends (the command exited,
//!   the lease was lost, an error), [`Supervised::shutdown`] ends the group before the lease is
//!   released: SIGTERM (and SIGCONT, for stopped members), then SIGKILL to whatever is left
//!   after the grace (`--kill-after`).
//! - When accord itself is killed outright (SIGKILL, the OOM killer) it runs no code, so:
//!   - Linux: the command has PR_SET_PDEATHSIG = SIGKILL, set between fork and exec. SIGKILL
//!     rather than SIGTERM because the kernel sends it once, with no escalation after a grace
//!     period: a command that traps or defers SIGTERM (a shell waiting for its children does)
//!     would otherwise run on unsupervised while the lease lapses.
//!   - Linux: a watchdog, accord itself re-executed (`__accord-watchdog`), joins the command's
//!     process group and blocks reading a pipe whose only writer is accord. The pipe reaches
//!     end-of-file when accord exits, however it exits; the watchdog then ends the group the way
//!     `shutdown` does (SIGTERM, SIGKILL after the grace). This reaches the command's children,
//!     which PR_SET_PDEATHSIG does not (it signals the direct child only). Being a member of the
//!     group, the watchdog also keeps its id from being reused while it signals it.
//!   - Not covered: processes that left the group (setsid, setpgid: daemons), processes the
//!     user may not signal (after a set-user-ID exec), a watchdog that was itself killed along
//!     with accord, and, elsewhere than on Linux, anything after accord is SIGKILLed.
//! - If accord's process group owns the terminal, the command's group is made its foreground
//!   group (so that it can read the terminal and gets Ctrl-C), and accord takes the terminal back
//!   when the command ends.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// The hidden first argument that makes `accord` a watchdog (see the module documentation).
pub const WATCHDOG_ARG: &str = "__accord-watchdog";

/// How often the members of a group being ended are counted.
const POLL: Duration = Duration::from_millis(50);

pub struct Supervised {
    child: tokio::process::Child,
    /// The command's process group (its pid).
    pgid: libc::pid_t,
    grace: Duration,
    /// The watchdog and the write end of its pipe (dropping it wakes the watchdog).
    watchdog: Option<(tokio::process::Child, OwnedFd)>,
    terminal: Option<Terminal>,
}

/// Starts `command` in a process group of its own, so that it does not outlive accord. `grace`
/// is the time between SIGTERM and SIGKILL when the group is ended.
pub fn spawn(mut command: tokio::process::Command, grace: Duration) -> io::Result<Supervised> {
    // SAFETY: getpid and gettid have no preconditions.
    #[cfg(target_os = "linux")]
    let supervisor = unsafe { libc::getpid() };
    // PR_SET_PDEATHSIG fires when the *thread* that forked exits, not the process: fork from
    // the main thread (whose end is the process's end), never from a runtime thread that may
    // retire while accord runs on (tokio's blocking threads do after 10 s idle). `run` executes
    // in `block_on` on the main thread; if that ever changes the watchdog still covers SIGKILL.
    #[cfg(target_os = "linux")]
    let on_main_thread = unsafe { libc::gettid() } == supervisor;
    #[cfg(target_os = "linux")]
    debug_assert!(
        on_main_thread,
        "accord run must start its command from the main thread"
    );
    let terminal = Terminal::owned_by_our_group();
    let tty = terminal.as_ref().map_or(-1, |t| t.fd.as_raw_fd());
    // SAFETY: the closure runs in the child between fork and exec, and calls only
    // async-signal-safe functions (prctl, getppid, setpgid, sigprocmask, tcsetpgrp, _exit)
    // on values copied in; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            #[cfg(target_os = "linux")]
            if on_main_thread {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                // accord may have died between fork and prctl: then no signal comes.
                if libc::getppid() != supervisor {
                    libc::_exit(128 + libc::SIGKILL);
                }
            }
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if tty >= 0 {
                // From a background group tcsetpgrp would stop us with SIGTTOU unless blocked.
                let mut block: libc::sigset_t = std::mem::zeroed();
                let mut old: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut block);
                libc::sigaddset(&mut block, libc::SIGTTOU);
                libc::sigprocmask(libc::SIG_BLOCK, &block, &mut old);
                libc::tcsetpgrp(tty, libc::getpid());
                libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            }
            Ok(())
        });
    }
    // std's spawn returns once the child has exec'd (or failed to), so the group exists now.
    let child = command.spawn()?;
    let pgid = child.id().expect("a child that was just spawned has a pid") as libc::pid_t;
    let watchdog = match start_watchdog(pgid, grace) {
        Ok(w) => w,
        Err(e) => {
            eprintln!(
                "accord: warning: cannot start the watchdog of the command's process group \
                 ({e}); if accord is killed outright, processes the command started may run on"
            );
            None
        }
    };
    Ok(Supervised {
        child,
        pgid,
        grace,
        watchdog,
        terminal,
    })
}

#[cfg(target_os = "linux")]
fn start_watchdog(
    pgid: libc::pid_t,
    grace: Duration,
) -> io::Result<Option<(tokio::process::Child, OwnedFd)>> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which we then own. O_CLOEXEC: the
    // command must not hold the write end, or the watchdog would never see end-of-file.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and ours.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    use std::process::Stdio;
    let mut command = tokio::process::Command::new("/proc/self/exe");
    command
        .arg(WATCHDOG_ARG)
        .arg(pgid.to_string())
        .arg(grace.as_millis().to_string())
        .stdin(Stdio::from(read))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .current_dir("/")
        .process_group(pgid);
    // SAFETY: only signal(2), async-signal-safe, between fork and exec. Ignored dispositions
    // survive exec, so the watchdog ignores these from its first instruction: it is in the
    // command's group and must outlive the signals sent to it (Ctrl-C, `kill 0`, our SIGTERM).
    unsafe {
        command.pre_exec(|| {
            for sig in [
                libc::SIGINT,
                libc::SIGTERM,
                libc::SIGHUP,
                libc::SIGQUIT,
                libc::SIGTSTP,
                libc::SIGTTIN,
                libc::SIGTTOU,
                libc::SIGPIPE,
            ] {
                libc::signal(sig, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    Ok(Some((command.spawn()?, write)))
}

#[cfg(not(target_os = "linux"))]
fn start_watchdog(
    _pgid: libc::pid_t,
    _grace: Duration,
) -> io::Result<Option<(tokio::process::Child, OwnedFd)>> {
    Ok(None)
}

impl Supervised {
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits for the command (the group's leader) to exit.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Ends the command's process group (see the module documentation) and reaps the command:
    /// SIGTERM to the command (if it still runs) and to its group, SIGKILL after the grace.
    /// Returns the command's status if this reaped it. `announce` tells of processes the
    /// command left behind (when it has exited by itself).
    pub async fn shutdown(&mut self, announce: bool) -> Option<ExitStatus> {
        let started = Instant::now();
        if let Some(t) = self.terminal.take() {
            t.take_back();
        }
        let watchdog_pid = self
            .watchdog
            .as_ref()
            .and_then(|(w, _)| w.id())
            .map(|p| p as libc::pid_t);
        if announce {
            let left = members(self.pgid, watchdog_pid);
            if left > 0 {
                eprintln!(
                    "accord: the command left {left} process{} running in its group; stopping \
                     {} (SIGTERM, SIGKILL after {})",
                    if left == 1 { "" } else { "es" },
                    if left == 1 { "it" } else { "them" },
                    humantime::format_duration(self.grace)
                );
            }
        }
        // The command itself, even if it has left its group. tokio forgets the pid once it
        // reaped the child, so this never signals a reused pid.
        if let Some(pid) = self.child.id() {
            signal(pid as libc::pid_t, libc::SIGTERM);
        }
        let mut ended = false;
        if let Some((mut watchdog, pipe)) = self.watchdog.take() {
            drop(pipe); // end-of-file: the watchdog ends the group, then exits
            let bound = self.grace + Duration::from_secs(2);
            ended = tokio::time::timeout(bound, watchdog.wait()).await.is_ok();
            if !ended {
                let _ = watchdog.start_kill();
                let _ = watchdog.wait().await;
            }
        }
        if !ended {
            let (pgid, grace) = (self.pgid, self.grace);
            let _ = tokio::task::spawn_blocking(move || end_group(pgid, grace, None)).await;
        }
        self.child.id()?; // already reaped (it exited by itself)
        let left = self.grace.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                // It left its group and ignores SIGTERM.
                let _ = self.child.start_kill();
                self.child.wait().await.ok()
            }
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        // Every path calls `shutdown`; should one not (a panic), dropping the pipe's write end
        // still has the watchdog end the group.
        if let Some(t) = self.terminal.take() {
            t.take_back();
        }
    }
}

fn signal(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Ends process group `pgid`: SIGTERM and SIGCONT, then SIGKILL if members other than
/// `exclude` (the caller, when it is a member) are still alive after `grace`.
fn end_group(pgid: libc::pid_t, grace: Duration, exclude: Option<libc::pid_t>) {
    if members(pgid, exclude) == 0 {
        return;
    }
    // SAFETY: killpg(2) has no memory-safety preconditions.
    unsafe {
        libc::killpg(pgid, libc::SIGTERM);
        libc::killpg(pgid, libc::SIGCONT);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        std::thread::sleep(POLL);
        if members(pgid, exclude) == 0 {
            return;
        }
    }
    let _ = writeln!(
        io::stderr(),
        "accord: processes of the command did not stop; sending SIGKILL"
    );
    // SAFETY: as above. When the caller is a member (the watchdog), this ends it too.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

/// How many live (not zombie) processes are in group `pgid`, not counting `exclude`.
#[cfg(target_os = "linux")]
fn members(pgid: libc::pid_t, exclude: Option<libc::pid_t>) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return usize::from(unsafe { libc::kill(-pgid, 0) } == 0);
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| Some(pid) != exclude)
        .filter(|pid| {
            // /proc/PID/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces and ')'.
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next().unwrap_or("X");
            let group = fields.nth(1).and_then(|g| g.parse::<libc::pid_t>().ok());
            group == Some(pgid) && state != "Z" && state != "X"
        })
        .count()
}

#[cfg(not(target_os = "linux"))]
fn members(pgid: libc::pid_t, _exclude: Option<libc::pid_t>) -> usize {
    // SAFETY: signal 0 only checks that the group has a member.
    usize::from(unsafe { libc::kill(-pgid, 0) } == 0)
}

/// `accord __accord-watchdog PGID GRACE_MS`, stdin the read end of accord's pipe: waits for
/// end-of-file (accord has exited or is done with the command), then ends the group.
pub fn watchdog_main(args: &[String]) -> std::process::ExitCode {
    let (Some(pgid), Some(grace_ms)) = (
        args.first().and_then(|a| a.parse::<libc::pid_t>().ok()),
        args.get(1).and_then(|a| a.parse::<u64>().ok()),
    ) else {
        let _ = writeln!(io::stderr(), "accord: {WATCHDOG_ARG} PGID GRACE_MS");
        return std::process::ExitCode::from(2);
    };
    if pgid <= 1 {
        return std::process::ExitCode::from(2);
    }
    let mut stdin = io::stdin().lock();
    let mut buf = [0u8; 64];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    end_group(pgid, Duration::from_millis(grace_ms), Some(me));
    std::process::ExitCode::SUCCESS
}

/// The controlling terminal, when accord's process group is its foreground group.
struct Terminal {
    fd: OwnedFd,
    pgrp: libc::pid_t,
}

impl Terminal {
    fn owned_by_our_group() -> Option<Terminal> {
        // SAFETY: open(2) with a NUL-terminated path; the descriptor is then ours.
        let fd = unsafe {
            libc::open(
                c"/dev/tty".as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None; // no controlling terminal
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: tcgetpgrp and getpgrp have no memory-safety preconditions.
        let pgrp = unsafe { libc::getpgrp() };
        (unsafe { libc::tcgetpgrp(fd.as_raw_fd()) } == pgrp).then_some(Terminal { fd, pgrp })
    }

    /// Makes accord's group the terminal's foreground group again.
    fn take_back(self) {
        // SAFETY: sigset manipulation on local values; tcsetpgrp on a descriptor we own. SIGTTOU
        // is blocked in this thread so that tcsetpgrp from the background does not stop us.
        unsafe {
            let mut block: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut block);
            libc::sigaddset(&mut block, libc::SIGTTOU);
            libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
            libc::tcsetpgrp(self.fd.as_raw_fd(), self.pgrp);
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
    }
}
