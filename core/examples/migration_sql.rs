//! Prints the SQL that creates or upgrades accord's schema: `make migrate-sql SCHEMA=accord`.

fn main() {
    let schema = std::env::args().nth(1).unwrap_or_else(|| "accord".into());
    match accord::migration_sql(&schema) {
        Ok(sql) => print!("{sql}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    }
}
