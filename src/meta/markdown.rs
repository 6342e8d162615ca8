//! Numbers and names from the data as Markdown table cells (summary.md's tables).

/// A name from the data (a system, a human key, an aspect) as Markdown text: a `|` would end its
/// table cell, a line break its table, and HTML would be read as markup.
pub fn md_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '|' => out.push_str("\\|"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// `md_text` of each.
pub fn md_all<S: AsRef<str>>(names: &[S]) -> Vec<String> {
    names.iter().map(|n| md_text(n.as_ref())).collect()
}

/// A coefficient to 3 decimals, — when undefined.
pub fn format_r(r: Option<f64>) -> String {
    r.map_or("—".into(), |r| format!("{r:.3}"))
}

#[cfg(test)]
mod tests {
    use super::md_text;

    /// A name from the data cannot end its table cell or table, or be read as markup.
    #[test]
    fn names_from_the_data_stay_text_in_a_table() {
        assert_eq!(md_text("a|b\n<script>&x"), "a\\|b &lt;script&gt;&amp;x");
        let row = format!("| {} | 1 |", md_text("sys|tem\r\nnext"));
        let cells = row.split(" | ").count();
        assert_eq!((cells, row.lines().count()), (2, 1), "{row}");
    }
}
