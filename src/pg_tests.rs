//! #[pg_test] unit tests: run inside a real backend started by `cargo pgrx test`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn tokens_rise_across_keys() {
        let first = Spi::get_one::<i64>("SELECT acquire_fenced(1, 1)")
            .unwrap()
            .unwrap();
        let second = Spi::get_one::<i64>("SELECT acquire_fenced(1, 2)")
            .unwrap()
            .unwrap();
        assert!(second > first);
    }
}
