//! `lowcomm`: see `lowcomm --help`.

fn main() {
    if let Err(e) = lowcomm::cli::main() {
        // Stopped by Ctrl-C with a checkpoint: say how to continue, exit as an interrupted program does.
        if let Some(i) = e.downcast_ref::<lowcomm::train::interrupt::Interrupted>() {
            // Every MPI rank ends this way; one says it.
            if lowcomm::train::interrupt::first_rank() {
                eprintln!("{i}");
            }
            std::process::exit(130);
        }
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
