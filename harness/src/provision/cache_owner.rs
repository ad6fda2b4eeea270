//! Whose cache it is. The binary cache is per user, but where `HOME` is unset it falls back
//! to `<tmp>/pgchaos-cache-<uid>`, a name anyone can create first in a shared temporary
//! directory and fill with "cached" binaries. So a cache directory (any of them, the fallback
//! above all) is used only if it is yours, or root's, and writable by no one else; a symlink
//! in its place only if it is yours. Anything else is refused with its path and owner.

use anyhow::{Result, bail};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Refuse a cache directory that another user owns or can write. A missing one is fine (it
/// is created by this user).
pub fn check(dir: &Path) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let Ok(link) = std::fs::symlink_metadata(dir) else {
        return Ok(());
    };
    if link.file_type().is_symlink() && link.uid() != me {
        bail!(
            "{}: the cache is a symlink of uid {}, not yours (uid {me}); refusing it \
             (set PGCHAOS_CACHE or HOME to a directory of your own)",
            dir.display(),
            link.uid()
        );
    }
    let Ok(m) = std::fs::metadata(dir) else {
        return Ok(());
    };
    if (m.uid() != me && m.uid() != 0) || m.mode() & 0o022 != 0 {
        bail!(
            "{}: the cache belongs to uid {} (mode {:o}), not to you (uid {me}) with no write \
             access for others; refusing binaries another user could have put there \
             (set PGCHAOS_CACHE or HOME to a directory of your own)",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_cache_writable_by_others_or_of_another_user_is_refused() {
        let d = std::env::temp_dir().join(format!("pgchaos-cache-owner-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        assert!(check(&d.join("missing")).is_ok());
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(check(&d).is_ok());
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check(&d).unwrap_err().to_string();
        assert!(
            e.contains("mode 777") && e.contains(&d.display().to_string()),
            "{e}"
        );
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
            let e = check(&d).unwrap_err().to_string();
            assert!(e.contains("belongs to uid 65534"), "{e}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
