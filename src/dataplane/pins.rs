//! Where pins live so that a restarted daemon finds them (docs/operations.md
//! "Where pins live"; docs/design.md "Restarts and adoption").
//!
//! Pins are files on a bpffs mount; a restarted daemon adopts the data plane
//! only if it sees the same mount. Two cases break that:
//! - `ip netns exec` (and any fresh private mount namespace) remounts
//!   `/sys`, so `/sys/fs/bpf` there is empty, and a bpffs mounted there
//!   dies with the daemon's mount namespace. nilb then pins in the host's
//!   bpffs, through PID 1's root (`/proc/1/root/sys/fs/bpf/...`), which
//!   outlives the daemon; only if the host has none does it mount its own,
//!   and it says at start that pins will not survive a restart.
//! - several daemons in different network namespaces would share the
//!   default `/sys/fs/bpf/nilb` of the host's bpffs: outside the host's
//!   network namespace the default pin directory (and state file) get the
//!   namespace's name, `/sys/fs/bpf/nilb-NAME` (`/run/nilb/state-NAME.yaml`).
//!
//! The tools (`nilb stats`, `tables`, `lookup --live`, `cleanup`) find the
//! pins the same way, so `ip netns exec NAME nilb stats` works.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use tracing::{info, warn};

/// Where bpffs is mounted on a host.
pub const BPFFS_ROOT: &str = "/sys/fs/bpf";
/// The default pin directory (in the host's network namespace).
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/nilb";
/// The default state file (in the host's network namespace).
pub const DEFAULT_STATE_FILE: &str = "/run/nilb/state.yaml";

const BPF_FS_MAGIC: i64 = 0xcafe4a11;

fn is_bpffs(p: &Path) -> bool {
    nix::sys::statfs::statfs(p).is_ok_and(|s| s.filesystem_type().0 == BPF_FS_MAGIC)
}

/// Inode of one of this process's namespaces (`net`, `mnt`), and PID 1's.
fn namespaces(kind: &str) -> Option<(u64, u64)> {
    let own = std::fs::metadata(format!("/proc/self/ns/{kind}"))
        .ok()?
        .ino();
    let init = std::fs::metadata(format!("/proc/1/ns/{kind}")).ok()?.ino();
    Some((own, init))
}

/// The name of this process's network namespace when it is not the host's:
/// its name under /run/netns (as `ip netns` gives it), else, when PID 1's
/// namespace can be read and differs, `net<inode>`. None in the host's
/// network namespace (or when it cannot be told).
pub fn netns_name() -> Option<String> {
    let own = std::fs::metadata("/proc/self/ns/net").ok()?.ino();
    let named = std::fs::read_dir("/run/netns").ok().and_then(|dir| {
        dir.flatten().find_map(|e| {
            let ino = std::fs::metadata(e.path()).ok()?.ino();
            (ino == own).then(|| e.file_name().to_string_lossy().into_owned())
        })
    });
    if named.is_some() {
        return named;
    }
    let (own, init) = namespaces("net")?;
    (own != init).then(|| format!("net{own}"))
}

/// Whether this process has a mount namespace of its own (not the host's):
/// told by PID 1's, or, where PID 1's cannot be read, by running in a
/// named network namespace (`ip netns exec` always unshares the mounts).
fn private_mounts() -> bool {
    match namespaces("mnt") {
        Some((own, init)) => own != init,
        None => netns_name().is_some(),
    }
}

/// The pin directory to use for `requested`: the default gets the network
/// namespace's name outside the host's namespace.
pub fn pin_dir_for(requested: &Path) -> PathBuf {
    match netns_name() {
        Some(name) if requested == Path::new(DEFAULT_PIN_DIR) => {
            PathBuf::from(format!("{DEFAULT_PIN_DIR}-{name}"))
        }
        _ => requested.to_path_buf(),
    }
}

/// The state file to use for `requested` (as [`pin_dir_for`]).
pub fn state_file_for(requested: &Path) -> PathBuf {
    match netns_name() {
        Some(name) if requested == Path::new(DEFAULT_STATE_FILE) => {
            PathBuf::from(format!("/run/nilb/state-{name}.yaml"))
        }
        _ => requested.to_path_buf(),
    }
}

/// `dir` as seen through PID 1's root (the host's mount namespace).
fn through_pid1(dir: &Path) -> PathBuf {
    Path::new("/proc/1/root").join(dir.strip_prefix("/").unwrap_or(dir))
}

/// Where a tool finds the pins of `dir`: `dir` itself, or, when this mount
/// namespace has no bpffs at /sys/fs/bpf (`ip netns exec`), the same path in
/// the host's bpffs.
pub fn locate(dir: &Path) -> PathBuf {
    if dir.starts_with(BPFFS_ROOT) && !is_bpffs(Path::new(BPFFS_ROOT)) {
        let host = through_pid1(dir);
        if host.exists() {
            return host;
        }
    }
    dir.to_path_buf()
}

/// What [`prepare`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The directory to pin under (possibly through /proc/1/root).
    pub dir: PathBuf,
    /// Why the pins will not survive a restart, if they will not.
    pub lost_on_restart: Option<String>,
}

/// Choose (and, if needed, mount) the bpffs for the daemon's pins under
/// `dir`, so that a restarted daemon finds them (module docs).
pub fn prepare(dir: &Path) -> Result<Placement> {
    let root = Path::new(BPFFS_ROOT);
    if !dir.starts_with(root) {
        let parent = dir.parent().unwrap_or(dir);
        if !is_bpffs(parent) && !is_bpffs(dir) {
            bail!("pin directory {} is not on a bpffs mount", dir.display());
        }
        return Ok(Placement {
            dir: dir.to_path_buf(),
            lost_on_restart: None,
        });
    }
    if is_bpffs(root) {
        return Ok(Placement {
            dir: dir.to_path_buf(),
            lost_on_restart: None,
        });
    }
    let private_mounts = private_mounts();
    if private_mounts && is_bpffs(&through_pid1(Path::new(BPFFS_ROOT))) {
        let host = through_pid1(dir);
        info!(
            pin_dir = %host.display(),
            "this mount namespace has no bpffs at /sys/fs/bpf (e.g. under `ip netns exec`): pinning in the host's bpffs through PID 1's root, where a restarted daemon finds the pins"
        );
        return Ok(Placement {
            dir: host,
            lost_on_restart: None,
        });
    }
    nix::mount::mount(
        Some("bpf"),
        root,
        Some("bpf"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .context("mounting bpffs at /sys/fs/bpf")?;
    let lost = private_mounts.then(|| {
        "the bpffs nilb mounted lives in this process's private mount namespace and the host has none at /sys/fs/bpf: mount one on the host (`mount -t bpf bpf /sys/fs/bpf`) or pass --pin-dir on a bpffs that outlives the daemon".to_string()
    });
    match &lost {
        Some(why) => warn!("pins will not survive a restart (a restarted daemon cannot adopt the data plane): {why}"),
        None => info!("mounted bpffs at /sys/fs/bpf"),
    }
    Ok(Placement {
        dir: dir.to_path_buf(),
        lost_on_restart: lost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_go_through_pid1_root() {
        assert_eq!(
            through_pid1(Path::new("/sys/fs/bpf/nilb")),
            PathBuf::from("/proc/1/root/sys/fs/bpf/nilb")
        );
    }

    #[test]
    fn only_defaults_get_the_namespace_name() {
        // Explicit paths are never changed.
        assert_eq!(pin_dir_for(Path::new("/x/y")), PathBuf::from("/x/y"));
        assert_eq!(
            state_file_for(Path::new("/x/s.yaml")),
            PathBuf::from("/x/s.yaml")
        );
        let d = pin_dir_for(Path::new(DEFAULT_PIN_DIR));
        match netns_name() {
            None => assert_eq!(d, PathBuf::from(DEFAULT_PIN_DIR)),
            Some(n) => assert_eq!(d, PathBuf::from(format!("/sys/fs/bpf/nilb-{n}"))),
        }
    }
}
