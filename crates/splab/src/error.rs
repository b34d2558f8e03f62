//! How a command fails. Bad input (a value the user typed) exits 2, like
//! clap's own usage errors, so scripts can tell a typo from a run that went
//! wrong; a failure during a run exits 1. Either way the message is one line
//! on stderr, and `main` is the only place that exits.

pub enum Fail {
    /// A bad value on the command line; the message names it.
    Input(String),
    /// Something went wrong while running.
    Run(String),
}

impl Fail {
    pub fn status(&self) -> i32 {
        match self {
            Fail::Input(_) => 2,
            Fail::Run(_) => 1,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Fail::Input(m) | Fail::Run(m) => m,
        }
    }
}

/// Shorthand for `map_err(Fail::Input)` on anything whose error is text.
pub fn input<T>(r: Result<T, String>) -> Result<T, Fail> {
    r.map_err(Fail::Input)
}
