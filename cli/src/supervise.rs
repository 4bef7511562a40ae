//! `accord run`'s command, kept from outliving accord.
//!
//! - The command runs in a process group of its own, so that the processes it starts are
//!   reached too. Whichever way `accord run` ends (the command exited,
//!   the lease was lost, an error), [`Supervised::shutdown`] ends the group before the lease is
//!   released: SIGTERM (and SIGCONT, for stopped members), then SIGKILL to whatever is left
//!   after the grace (`--kill-after`).
//! - When accord itself is killed outright (SIGKILL, the OOM killer) it runs no code, so:
//!   - Linux: the command has PR_SET_PDEATHSIG = SIGKILL, set between fork and exec. SIGKILL
//!     rather than SIGTERM because the kernel sends it once, with no escalation after a grace
//!     period: a command that traps or defers SIGTERM (a shell waiting for its children does)
//!     would otherwise run on unsupervised while the lease lapses.
//!   - Linux: a watchdog, accord itself re-executed (`__accord-watchdog`), is started first, as
//!     the leader of a new process group, and the command joins that group between fork and
//!     exec, so there is no moment when the command runs unwatched. The watchdog blocks reading a
//!     pipe whose only writer is accord. The pipe reaches end-of-file when accord exits, however
//!     it exits; the watchdog then ends the group the way `shutdown` does (SIGTERM, SIGKILL after
//!     the grace). This reaches the command's children, which PR_SET_PDEATHSIG does not (it
//!     signals the direct child only). As the group's leader, the watchdog also keeps its id from
//!     being reused while it signals it.
//!   - Not covered: processes that left the group (setsid, setpgid: daemons), processes the
//!     user may not signal (after a set-user-ID exec), a watchdog that was itself killed along
//!     with accord, and, elsewhere than on Linux, anything after accord is SIGKILLed.
//! - In a terminal (accord's process group is the terminal's foreground group: someone typed the
//!   command, or a script did), the command stays in accord's group instead, so that it reads the
//!   terminal and job control works as for any command: Ctrl-C and Ctrl-Z reach accord and the
//!   command together, `bg`/`fg` resume both, and a script whose `accord run` is interrupted is
//!   interrupted too. There the group is the shell's job (a pipeline's other commands included),
//!   so it is never ended: the command itself gets SIGTERM, then SIGKILL, and PR_SET_PDEATHSIG
//!   still covers SIGKILL of accord; processes the command left behind are not ended.

use std::io::{self, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// The hidden first argument that makes `accord` a watchdog (see the module documentation).
pub const WATCHDOG_ARG: &str = "__accord-watchdog";

/// How often the members of a group being ended are counted.
const POLL: Duration = Duration::from_millis(50);

pub struct Supervised {
    child: tokio::process::Child,
    /// The command's process group, when it has one of its own (not in a terminal).
    pgid: Option<libc::pid_t>,
    grace: Duration,
    /// The watchdog and the write end of its pipe (dropping it wakes the watchdog).
    watchdog: Option<(tokio::process::Child, OwnedFd)>,
}

/// Starts `command` in a process group of its own, so that it does not outlive accord. `grace`
/// is the time between SIGTERM and SIGKILL when the group is ended.
pub async fn spawn(
    mut command: tokio::process::Command,
    grace: Duration,
) -> io::Result<Supervised> {
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
    let own_group = !in_foreground_of_terminal();
    // The group's leader is the watchdog when there is one (the command joins its group before
    // it execs); else the command leads a group of its own.
    let watchdog = if own_group {
        start_watchdog(grace).unwrap_or_else(|e| {
            note!(
                "accord: warning: cannot start the watchdog of the command's process group \
                 ({e}); if accord is killed outright, processes the command started may run on"
            );
            None
        })
    } else {
        None
    };
    let leader = match &watchdog {
        Some((w, _)) => w.id().map_or(0, |p| p as libc::pid_t),
        None => 0,
    };
    // SAFETY: the closure runs in the child between fork and exec, and calls only
    // async-signal-safe functions (prctl, getppid, setpgid, _exit) on values copied in; it
    // allocates nothing.
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
            if own_group && libc::setpgid(0, leader) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // std's spawn returns once the child has exec'd (or failed to), so it is in its group now.
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            if let Some((mut w, pipe)) = watchdog {
                drop(pipe);
                let _ = w.wait().await;
            }
            return Err(e);
        }
    };
    let pgid = match (own_group, leader) {
        (false, _) => None,
        (true, 0) => child.id().map(|p| p as libc::pid_t),
        (true, leader) => Some(leader),
    };
    Ok(Supervised {
        child,
        pgid,
        grace,
        watchdog,
    })
}

/// True when accord's process group is the foreground group of its controlling terminal.
fn in_foreground_of_terminal() -> bool {
    // SAFETY: open(2) with a NUL-terminated path; the descriptor is closed before returning.
    let fd = unsafe {
        libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return false; // no controlling terminal
    }
    // SAFETY: tcgetpgrp, getpgrp and close have no memory-safety preconditions.
    unsafe {
        let foreground = libc::tcgetpgrp(fd) == libc::getpgrp();
        libc::close(fd);
        foreground
    }
}

/// Starts the watchdog as the leader of a new process group (the command's, once it joins).
#[cfg(target_os = "linux")]
fn start_watchdog(grace: Duration) -> io::Result<Option<(tokio::process::Child, OwnedFd)>> {
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
        .arg(grace.as_millis().to_string())
        .stdin(Stdio::from(read))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .current_dir("/");
    // SAFETY: only signal(2) and setpgid(2), async-signal-safe, between fork and exec. Ignored
    // dispositions survive exec, so the watchdog ignores these from its first instruction, and
    // makes its group only then: it leads the command's group and must outlive the signals sent
    // to it (`kill 0` from the command, our SIGTERM).
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
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(Some((command.spawn()?, write)))
}

#[cfg(not(target_os = "linux"))]
fn start_watchdog(_grace: Duration) -> io::Result<Option<(tokio::process::Child, OwnedFd)>> {
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
        let watchdog_pid = self
            .watchdog
            .as_ref()
            .and_then(|(w, _)| w.id())
            .map(|p| p as libc::pid_t);
        if let (true, Some(pgid)) = (announce, self.pgid) {
            let left = members(pgid, watchdog_pid);
            if left > 0 {
                note!(
                    "accord: the command left {left} process{} running in its group; stopping \
                     {} (SIGTERM, SIGKILL after {})",
                    if left == 1 { "" } else { "es" },
                    if left == 1 { "it" } else { "them" },
                    humantime::format_duration(self.grace)
                );
            }
        }
        // The command itself only when the group's signal would miss it (no group of its own,
        // or it left the group): a second SIGTERM makes some programs skip their clean stop.
        // tokio forgets the pid once it reaped the child, so this never signals a reused pid.
        if let Some(pid) = self.child.id().map(|p| p as libc::pid_t) {
            // SAFETY: getpgid has no memory-safety preconditions.
            if self
                .pgid
                .is_none_or(|pgid| unsafe { libc::getpgid(pid) } != pgid)
            {
                signal(pid, libc::SIGTERM);
            }
        }
        if let Some((mut watchdog, pipe)) = self.watchdog.take() {
            drop(pipe); // end-of-file: the watchdog ends the group, then exits
            let bound = self.grace + Duration::from_secs(2);
            if tokio::time::timeout(bound, watchdog.wait()).await.is_err() {
                let _ = watchdog.start_kill();
                let _ = watchdog.wait().await;
            }
        }
        // Whatever is left (no watchdog, or one that died before its work): a no-op when the
        // group is empty.
        if let Some(pgid) = self.pgid {
            let grace = self.grace;
            let _ = tokio::task::spawn_blocking(move || end_group(pgid, grace, None)).await;
        }
        self.child.id()?; // already reaped (it exited by itself)
        let left = self.grace.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                // It ignores SIGTERM (or left its group).
                let _ = self.child.start_kill();
                self.child.wait().await.ok()
            }
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
    note!("accord: processes of the command did not stop; sending SIGKILL");
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

/// `accord __accord-watchdog GRACE_MS`, stdin the read end of accord's pipe, the leader of the
/// command's group: waits for end-of-file (accord has exited or is done with the command), then
/// ends its group.
pub fn watchdog_main(args: &[String]) -> std::process::ExitCode {
    let Some(grace_ms) = args.first().and_then(|a| a.parse::<u64>().ok()) else {
        note!("accord: {WATCHDOG_ARG} GRACE_MS");
        return std::process::ExitCode::from(2);
    };
    // SAFETY: getpgrp and getpid have no preconditions.
    let (pgid, me) = unsafe { (libc::getpgrp(), libc::getpid()) };
    if pgid != me {
        note!("accord: {WATCHDOG_ARG} must lead its process group");
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
    end_group(pgid, Duration::from_millis(grace_ms), Some(me));
    std::process::ExitCode::SUCCESS
}
