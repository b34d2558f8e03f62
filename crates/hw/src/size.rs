//! Memory sizes as people type them: `512M`, `8G`, `8GiB`, `1.5G`,
//! `16777216`. Units are binary (K = 1024), as they are for memory; `B`,
//! `iB` and lower case are accepted so that `8GiB`, `8GB` and `8g` all
//! mean the same thing. Sizes and numbers as people read them in reports.

/// Parses a size into bytes. The error names the text that was given.
pub fn parse(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("invalid size {text:?}: expected a number with an optional unit (e.g. 512M, 8G, 8GiB)"));
    }
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("invalid size {text:?}: unknown unit {unit:?} (use K, M, G or T, optionally followed by B or iB)")),
    };
    let too_big = || format!("invalid size {text:?}: too large");
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(1u64 << shift).ok_or_else(too_big);
    }
    // Only a fraction gets here (a plain integer parsed above); it must
    // still come to a whole number of bytes after scaling.
    let x: f64 = num.parse().map_err(|_| format!("invalid size {text:?}: {num:?} is not a number"))?;
    let bytes = x * (1u64 << shift) as f64;
    if bytes >= u64::MAX as f64 {
        return Err(too_big());
    }
    if bytes.fract() != 0.0 {
        return Err(format!("invalid size {text:?}: not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// A size for people to read: the largest binary unit that divides it, or
/// one decimal place when none does.
pub fn show(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (name, shift) in UNITS {
        if bytes >= 1 << shift {
            let v = bytes as f64 / (1u64 << shift) as f64;
            return if bytes.is_multiple_of(1 << shift) { format!("{} {name}", bytes >> shift) } else { format!("{v:.1} {name}") };
        }
    }
    format!("{bytes} B")
}

/// A number for a table: whole numbers as they are, others to about four
/// significant digits.
pub fn num(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let digits = (3 - v.abs().log10().floor() as i32).clamp(0, 9) as usize;
    format!("{v:.digits$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse("512M"), Ok(512 << 20));
        assert_eq!(parse("8G"), Ok(8 << 30));
        assert_eq!(parse("8GiB"), Ok(8 << 30));
        assert_eq!(parse("8gb"), Ok(8 << 30));
        assert_eq!(parse("256G"), Ok(256 << 30));
        assert_eq!(parse("1.5G"), Ok(3 << 29));
        assert_eq!(parse("16777216"), Ok(16 << 20));
        assert_eq!(parse("1T"), Ok(1 << 40));
    }

    #[test]
    fn errors_name_the_text() {
        for bad in ["12Q", "", "G", "1.2.3G", "0.3B", "99999999999T", "-1G"] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn shows_sizes() {
        assert_eq!(show(8 << 30), "8 GiB");
        assert_eq!(show(3 << 29), "1.5 GiB");
        assert_eq!(show(100), "100 B");
    }

    #[test]
    fn numbers() {
        assert_eq!(num(12.0), "12");
        assert_eq!(num(0.012345), "0.01235");
        assert_eq!(num(1234.5678), "1235");
        assert_eq!(num(1.23456), "1.235");
    }
}
