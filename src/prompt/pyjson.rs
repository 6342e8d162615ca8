//! Python's `json.dumps`, byte for byte: chat templates call `tojson` and transformers renders it
//! with Python's json module, whose separators, float repr and escaping differ from serde_json's.

use serde_json::Value;

#[derive(Clone, Debug, Default)]
pub struct DumpOptions {
    pub ensure_ascii: bool,
    /// `None`: one line. `Some(s)`: newline and `s` repeated per level.
    pub indent: Option<String>,
    /// (item separator, key separator); Python's default depends on `indent`.
    pub separators: Option<(String, String)>,
    pub sort_keys: bool,
}

pub fn dumps(value: &Value, options: &DumpOptions) -> String {
    let (item_sep, key_sep) = options.separators.clone().unwrap_or_else(|| {
        let item = if options.indent.is_some() { "," } else { ", " };
        (item.to_string(), ": ".to_string())
    });
    let mut out = String::new();
    write_value(&mut out, value, options, &item_sep, &key_sep, 0);
    out
}

fn newline(out: &mut String, indent: &Option<String>, level: usize) {
    if let Some(unit) = indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(unit);
        }
    }
}

fn write_value(
    out: &mut String,
    v: &Value,
    o: &DumpOptions,
    item_sep: &str,
    key_sep: &str,
    level: usize,
) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (_, Some(u), _) => out.push_str(&u.to_string()),
            (_, _, Some(f)) => out.push_str(&float_repr(f)),
            _ => out.push_str(&n.to_string()),
        },
        Value::String(s) => write_string(out, s, o.ensure_ascii),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, &o.indent, level + 1);
                write_value(out, item, o, item_sep, key_sep, level + 1);
            }
            newline(out, &o.indent, level);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if o.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, &o.indent, level + 1);
                write_string(out, k, o.ensure_ascii);
                out.push_str(key_sep);
                write_value(out, item, o, item_sep, key_sep, level + 1);
            }
            newline(out, &o.indent, level);
            out.push('}');
        }
    }
}

fn write_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: the shortest digits that round-trip, in fixed notation when the
/// decimal exponent is in -4..16, else `d.ddde+XX`.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    // `{:e}` gives the shortest round-trip digits, e.g. "1.2345e-7" or "-5e0".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` always has an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` exponent is an integer");
    let (sign, mantissa) = mantissa
        .strip_prefix('-')
        .map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let body = if exp >= 0 {
            let int_len = exp + 1;
            if n <= int_len {
                format!("{digits}{}.0", "0".repeat((int_len - n) as usize))
            } else {
                format!(
                    "{}.{}",
                    &digits[..int_len as usize],
                    &digits[int_len as usize..]
                )
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        };
        format!("{sign}{body}")
    } else {
        let frac = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits.clone()
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{frac}e{esign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        // Values and strings from CPython's repr().
        for (f, py) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (123456789012345.6, "123456789012345.6"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.2345e-7, "1.2345e-07"),
            (100.0, "100.0"),
            (0.0, "0.0"),
            (1e300, "1e+300"),
        ] {
            assert_eq!(float_repr(f), py, "{f}");
        }
    }

    #[test]
    fn dumps_matches_python_defaults() {
        let v: Value =
            serde_json::from_str(r#"{"a": [1, 2.0, "日本\n\"x\""], "b": {}, "c": []}"#).unwrap();
        // json.dumps(v, ensure_ascii=False)
        assert_eq!(
            dumps(&v, &DumpOptions::default()),
            r#"{"a": [1, 2.0, "日本\n\"x\""], "b": {}, "c": []}"#
        );
        // json.dumps(v, ensure_ascii=True, indent=2)
        let o = DumpOptions {
            ensure_ascii: true,
            indent: Some("  ".into()),
            ..Default::default()
        };
        assert_eq!(
            dumps(&v, &o),
            "{\n  \"a\": [\n    1,\n    2.0,\n    \"\\u65e5\\u672c\\n\\\"x\\\"\"\n  ],\n  \"b\": {},\n  \"c\": []\n}"
        );
    }
}
