//! A linear pre-check of YAML documents before they reach the parser.
//!
//! The YAML parser's time grows with the square of a document's nesting depth: a 256 KiB
//! policy of nested brackets took over a minute, on every replica that applied it. No
//! policy or envoyproxy/ratelimit document nests anywhere near these bounds, so deeper
//! documents are refused by one pass over the text, naming the bound.
//!
//! The scan counts flow collections (`[`, `{`) outside quoted scalars and comments, and the
//! indentation of each line. Brackets inside a block scalar's text (`|`, `>`) are counted
//! too: a description holding more than [`FLOW_DEPTH_MAX`] unclosed brackets is refused,
//! which errs on the side of refusing.

/// Deepest nesting of flow collections (`[`/`{`) accepted.
pub const FLOW_DEPTH_MAX: usize = 32;
/// Widest indentation accepted, in characters: 64 levels of two spaces.
pub const INDENT_MAX: usize = 128;

/// Refuses `text` if it nests deeper than the bounds; the message names where and which.
pub fn check_nesting(text: &str) -> Result<(), String> {
    let mut depth = 0usize;
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        if indent > INDENT_MAX {
            return Err(format!(
                "line {}: indented {indent} characters, at most {INDENT_MAX} allowed",
                n + 1
            ));
        }
        depth = scan_line(line, depth).map_err(|()| {
            format!(
                "line {}: collections nested deeper than {FLOW_DEPTH_MAX} levels",
                n + 1
            )
        })?;
    }
    Ok(())
}

/// The flow depth after `line`, starting at `depth`; Err once it passes the bound.
fn scan_line(line: &str, mut depth: usize) -> Result<usize, ()> {
    let mut quote: Option<u8> = None;
    let mut previous = b' ';
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(b'"') if b == b'\\' => i += 1,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None => match b {
                b'#' if previous == b' ' || previous == b'\t' || i == 0 => break,
                b'"' | b'\'' if starts_scalar(previous) => quote = Some(b),
                b'[' | b'{' => {
                    depth += 1;
                    if depth > FLOW_DEPTH_MAX {
                        return Err(());
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        previous = b;
        i += 1;
    }
    Ok(depth)
}

/// Whether a quote after `previous` opens a quoted scalar (not an apostrophe in a word).
fn starts_scalar(previous: u8) -> bool {
    matches!(previous, b' ' | b'\t' | b'[' | b'{' | b',' | b':' | b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_flow_depth_across_lines_and_skips_quotes_and_comments() {
        assert_eq!(scan_line("a: [{b: [1]}, 'x[[', \"y{\\\"[\"]", 0), Ok(0));
        assert_eq!(scan_line("a: [b, # [[[[", 0), Ok(1));
        assert_eq!(scan_line("it's [", 0), Ok(1));
        let deep = format!("a: {}", "[".repeat(FLOW_DEPTH_MAX + 1));
        assert_eq!(scan_line(&deep, 0), Err(()));
        let text = format!("a: {}\n{}\n", "[".repeat(20), "[".repeat(20));
        assert!(check_nesting(&text).unwrap_err().contains("line 2"));
    }
}
