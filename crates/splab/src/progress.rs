//! Progress bars on stderr for long runs. They are hidden when the output is
//! JSON (a script is reading) or stderr is not a terminal, and redrawn only
//! when the count moved by at least 1% so the simulator's callback stays
//! cheap even if it is called often.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

pub struct Progress {
    bar: ProgressBar,
    /// Smallest change worth redrawing for (1% of the total).
    step: u64,
    shown: u64,
}

impl Progress {
    /// A bar for `total` units (`unit` names them, e.g. "refs"), labelled
    /// with `label`.
    pub fn new(total: u64, label: &str, unit: &str, hidden: bool) -> Progress {
        let bar = if hidden || !std::io::stderr().is_terminal() {
            ProgressBar::hidden()
        } else {
            let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let template = format!("{{prefix:>12}} [{{bar:30}}] {{percent:>3}}% {{human_pos}}/{{human_len}} {unit} ({{elapsed}}, eta {{eta}})");
            if let Ok(style) = ProgressStyle::with_template(&template) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_prefix(label.to_string());
            b
        };
        Progress { bar, step: (total / 100).max(1), shown: 0 }
    }

    pub fn update(&mut self, done: u64) {
        if done.abs_diff(self.shown) >= self.step {
            self.shown = done;
            self.bar.set_position(done);
        }
    }

    /// Prints `line` on stderr above the bar, or alone where no bar is
    /// drawn (stderr not a terminal).
    pub fn line(&self, line: &str) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    /// Removes the bar so what follows on the terminal starts clean.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}
