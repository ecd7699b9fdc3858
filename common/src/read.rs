//! Reading files people name on command lines and in configs, never past a bound: a path
//! that names `/dev/zero`, a pipe or a runaway file is refused once the bound is passed,
//! instead of filling memory.

use std::io::{self, Read};
use std::path::Path;

/// The bytes of `path`, refused with [`io::ErrorKind::InvalidData`] (naming the bound) when
/// it holds more than `max_bytes`.
pub fn read_capped(path: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max_bytes} bytes"),
        ));
    }
    Ok(bytes)
}

/// [`read_capped`] as UTF-8 text.
pub fn read_text_capped(path: &Path, max_bytes: u64) -> io::Result<String> {
    String::from_utf8(read_capped(path, max_bytes)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_source_is_refused_at_the_bound() {
        let err = read_capped(Path::new("/dev/zero"), 1024).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("larger than 1024 bytes"), "{err}");
    }

    #[test]
    fn a_file_within_the_bound_is_read_whole() {
        let dir = std::env::temp_dir().join(format!("leasehold-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.yaml");
        std::fs::write(&path, "id: x\n").unwrap();
        assert_eq!(read_text_capped(&path, 6).unwrap(), "id: x\n");
        assert!(read_text_capped(&path, 5).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
