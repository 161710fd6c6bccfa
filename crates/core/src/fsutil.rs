//! File writes that never leave a half-written file behind, and the one
//! capped reader every outside file goes through (a file named inside another
//! input included): a regular file only, opened without blocking, read up to a
//! cap, so `/dev/zero`, a FIFO or a huge file is refused, never read.

use anyhow::{Context, Result, bail};
use std::io::{Read, Write};
use std::path::Path;

/// The most a scenario, zoo or daemon config file may hold.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// Reads `path` (`what` names it in errors: "scenario file", "log"...): only a
/// regular file (a symlink is followed to what it names) of at most `max`
/// bytes. A FIFO, a device or a socket is refused without blocking: the file is
/// opened non-blocking and checked on the descriptor, so it cannot be swapped
/// between the check and the read; the cap holds even if it grows meanwhile.
pub fn read_capped(path: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    let mut file = open_regular(path, what)?;
    let len = file
        .metadata()
        .with_context(|| format!("cannot stat {what} {}", crate::text::path(path)))?
        .len();
    if len > max {
        bail!(
            "{what} {} has {len} bytes, over the {} a {what} may have",
            crate::text::path(path),
            show_bytes(max)
        );
    }
    let mut bytes = Vec::with_capacity(len as usize);
    (&mut file)
        .take(max + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {what} {}", crate::text::path(path)))?;
    if bytes.len() as u64 > max {
        bail!(
            "{what} {} grew past the {} a {what} may have while it was read",
            crate::text::path(path),
            show_bytes(max)
        );
    }
    Ok(bytes)
}

/// [`read_capped`] as UTF-8 text.
pub fn read_capped_to_string(path: &Path, max: u64, what: &str) -> Result<String> {
    String::from_utf8(read_capped(path, max, what)?)
        .map_err(|_| anyhow::anyhow!("{what} {} is not UTF-8 text", crate::text::path(path)))
}

/// Opens `path` for reading without blocking and refuses anything but a
/// regular file.
pub fn open_regular(path: &Path, what: &str) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("cannot open {what} {}", crate::text::path(path)))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot stat {what} {}", crate::text::path(path)))?;
    if !meta.is_file() {
        bail!(
            "{what} {} is not a regular file ({})",
            crate::text::path(path),
            kind_of(&meta.file_type())
        );
    }
    Ok(file)
}

/// What a non-regular file is, for a refusal.
pub fn kind_of(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

fn show_bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, then renames it
/// over `path`: readers see the old file or the new one, never a torn one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let file_name = path
        .file_name()
        .with_context(|| format!("{} is not a file path", path.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> Result<()> {
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))
    })();
    if result.is_err() {
        // Best effort: the write already failed, the temporary file is litter.
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("out.json");
        write_atomically(&path, b"one").expect("first write");
        write_atomically(&path, b"two").expect("second write");
        assert_eq!(std::fs::read(&path).expect("readable"), b"two");
        let entries = std::fs::read_dir(dir.path()).expect("dir").count();
        assert_eq!(entries, 1, "no temporary file left behind");
    }

    #[test]
    fn the_capped_reader_refuses_devices_fifos_and_big_files() {
        let err =
            read_capped(Path::new("/dev/zero"), 1 << 20, "scenario file").expect_err("a device");
        assert!(format!("{err:#}").contains("a character device"), "{err:#}");
        let dir = tempfile::tempdir().expect("temp dir");
        let big = dir.path().join("big");
        std::fs::File::create(&big)
            .expect("create")
            .set_len(8 << 30)
            .expect("sparse");
        let err = read_capped(&big, 4 << 20, "log").expect_err("too big");
        assert!(format!("{err:#}").contains("over the 4 MiB"), "{err:#}");
        let small = dir.path().join("small");
        std::fs::write(&small, b"abc").expect("write");
        assert_eq!(read_capped(&small, 3, "x").expect("fits"), b"abc");
        assert!(read_capped_to_string(&small, 2, "x").is_err());
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_panic() {
        let err = write_atomically(Path::new("/nonexistent-dir/x/out.json"), b"x")
            .expect_err("cannot create");
        assert!(format!("{err:#}").contains("cannot write"));
    }
}
