//! `lowcomm`: see `lowcomm --help`.

fn main() {
    if let Err(e) = lowcomm::cli::main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
