//! `splab`: the command line (`splab::cli`).

fn main() {
    splab::cli::main()
}
