//! The output folder (I/O): the arbiters' `--registry` layout — every `*.yaml` in the
//! folder, sorted, read as one registry (`lock_store::registry_files`). This controller
//! keeps one file, [`FILE`], and replaces it whole: written to a temp name the reader
//! skips (not `*.yaml`), flushed, then renamed over the old one. A reader sees the old set
//! or the new one, never a part (and a folder it cannot read it retries, keeping its set).

use super::decide::FILE;
use std::io::Write as _;
use std::path::{Path, PathBuf};

const TEMP: &str = ".registry.yaml.tmp";

/// The folder's current text (None: no file yet).
pub fn read(out: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(out.join(FILE)) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces the folder's file with `text`, atomically.
pub fn write(out: &Path, text: &str) -> std::io::Result<()> {
    let tmp = out.join(TEMP);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, out.join(FILE))?;
    // The rename itself, durable (best effort: not every filesystem syncs a directory).
    if let Ok(dir) = std::fs::File::open(out) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Registry files in `out` this controller did not write: the arbiters would merge them
/// into its set, so the controller refuses to start beside them.
pub fn foreign(out: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(out)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .filter(|p| p.file_name().is_none_or(|n| n != FILE))
        .collect();
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_replaces_the_one_file_and_the_reader_sees_only_it() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        assert_eq!(read(out).unwrap(), None);
        write(out, "a: 1\n").unwrap();
        write(out, "a: 2\n").unwrap();
        assert_eq!(read(out).unwrap().as_deref(), Some("a: 2\n"));
        // No temp file left, and a temp file would not be read as a registry file.
        assert!(!out.join(TEMP).exists());
        assert!(foreign(out).unwrap().is_empty());
        let sources = lock_store::registry_files::read_sources(out).unwrap();
        assert_eq!(sources.len(), 1);
        std::fs::write(out.join("classes.yaml"), "x: 1\n").unwrap();
        assert_eq!(foreign(out).unwrap(), vec![out.join("classes.yaml")]);
    }
}
