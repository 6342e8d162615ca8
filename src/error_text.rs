//! An error as the text a user reads: its chain of causes, each said once.

/// `err` and its causes joined by ": ", a cause whose text its parent already shows (an I/O
/// error inside a message that quotes it) left out.
pub fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    for cause in std::iter::successors(Some(err), |e| e.source()) {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}
