//! A machine profile's TOML error in words a user can act on: the file,
//! the line and column, the field (as a dotted path from the table it is
//! in, with which `[[tlb]]` or `[[pwc]]` entry it is), what is wrong, and
//! the line itself. The TOML parser gives the message and a byte span;
//! the rest is read from the text around the span.

/// `origin` names the profile (a file or a built-in name).
pub(crate) fn describe(text: &str, origin: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim();
    let Some(span) = e.span() else {
        return format!("machine profile {origin}: {msg}");
    };
    let start = floor_char_boundary(text, span.start.min(text.len()));
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_no = text[..line_start].matches('\n').count() + 1;
    let col = text[line_start..start].chars().count() + 1;
    let line = text[line_start..].lines().next().unwrap_or("").trim_end();
    let field = match field(text, line_start, line, msg) {
        Some(f) => format!(", field {f}"),
        None => String::new(),
    };
    format!("machine profile {origin}, line {line_no}, column {col}{field}: {msg}\n  {line_no} | {line}")
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The name between backquotes after `what` in a message
/// (``missing field `sizes` `` gives `sizes`).
fn quoted_after<'a>(msg: &'a str, what: &str) -> Option<&'a str> {
    let rest = &msg[msg.find(what)? + what.len()..];
    let rest = rest.trim_start().strip_prefix('`')?;
    Some(&rest[..rest.find('`')?])
}

/// A table header line's name and whether it is an array entry
/// (`[[tlb]]`).
fn header(line: &str) -> Option<(&str, bool)> {
    let l = line.split('#').next()?.trim();
    if let Some(n) = l.strip_prefix("[[").and_then(|l| l.strip_suffix("]]")) {
        return Some((n.trim(), true));
    }
    let n = l.strip_prefix('[')?.strip_suffix(']')?;
    Some((n.trim(), false))
}

/// The table a line belongs to, by the last header at or before it: its
/// dotted name, and for an array entry which one it is (1-based).
fn table_at(text: &str, line_start: usize) -> Option<(String, Option<usize>)> {
    let upto = &text[..text[line_start..].find('\n').map_or(text.len(), |i| line_start + i)];
    let (name, array) = upto.lines().rev().find_map(header)?;
    let nth = array.then(|| upto.lines().filter_map(header).filter(|h| *h == (name, true)).count());
    Some((name.to_string(), nth))
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The field the error is about: named by the message (a missing or
/// unknown field) or the key on the line, under the table it is in.
fn field(text: &str, line_start: usize, line: &str, msg: &str) -> Option<String> {
    let named = quoted_after(msg, "missing field").or_else(|| quoted_after(msg, "unknown field"));
    let key = named.map(str::to_string).or_else(|| {
        if header(line).is_some() {
            return None;
        }
        // `key = value`, or a key alone on its line.
        let k = line.split(['=', '#']).next()?.trim().trim_matches('"');
        let bare = |c: char| c.is_ascii_alphanumeric() || "_-.".contains(c);
        (!k.is_empty() && k.chars().all(bare)).then(|| k.to_string())
    });
    let table = table_at(text, line_start);
    let path = match (&table, &key) {
        (Some((t, _)), Some(k)) => format!("`{t}.{k}`"),
        (None, Some(k)) => format!("`{k}`"),
        (Some((t, _)), None) => format!("`{t}`"),
        (None, None) => return None,
    };
    Some(match table {
        Some((t, Some(n))) => format!("{path} (in the {} [[{t}]])", ordinal(n)),
        _ => path,
    })
}

#[cfg(test)]
mod tests {
    use crate::profile::Profile;

    fn with(from: &str, to: &str) -> String {
        let text = include_str!("../../../profiles/sapphire-rapids.toml");
        assert!(text.contains(from), "{from}");
        text.replacen(from, to, 1)
    }

    fn line_of(text: &str, what: &str) -> usize {
        text.lines().position(|l| l.contains(what)).unwrap() + 1
    }

    /// Which [[tlb]] of the profile's text holds `what` (1 for the first).
    fn tlb_holding(text: &str, what: &str) -> usize {
        text[..text.find(what).unwrap()].matches("[[tlb]]").count()
    }

    #[test]
    fn a_missing_field_names_the_file_the_line_and_the_field() {
        // The 2 MB array loses its sizes.
        let from = "sizes = [\"2M\"]\n";
        let n = tlb_holding(include_str!("../../../profiles/sapphire-rapids.toml"), from);
        let text = with(from, "");
        let e = Profile::parse(&text, "host.toml").unwrap_err();
        assert!(e.starts_with("machine profile host.toml, line "), "{e}");
        assert!(e.contains(&format!("field `tlb.sizes` (in the {} [[tlb]])", super::ordinal(n))) && e.contains("missing field `sizes`"), "{e}");
    }

    #[test]
    fn a_key_without_a_value_names_its_line_and_key() {
        let text = with("freq_ghz = 3.0", "freq_ghz");
        let e = Profile::parse(&text, "host.toml").unwrap_err();
        let n = line_of(&text, "freq_ghz");
        assert!(e.contains(&format!("host.toml, line {n}, column 9, field `freq_ghz`: ")), "{e}");
        assert!(e.contains(&format!("\n  {n} | freq_ghz")), "{e}");
    }

    #[test]
    fn a_value_of_the_wrong_type_names_the_table_and_key() {
        let text = with("mshrs = ", "mshrs = \"many\" #");
        let e = Profile::parse(&text, "p.toml").unwrap_err();
        let n = line_of(&text, "mshrs = \"many\"");
        assert!(e.contains(&format!("p.toml, line {n}, ")) && e.contains("field `core.mshrs`"), "{e}");
        let text = with("entries = ", "entires = 3\nentries = ");
        let e = Profile::parse(&text, "p.toml").unwrap_err();
        assert!(e.contains("field `tlb.entires` (in the 1st [[tlb]])") && e.contains("unknown field `entires`"), "{e}");
    }
}
