fn main() {
    std::process::exit(pgchaos::cli::main());
}
