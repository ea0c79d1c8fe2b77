//! #[pg_test] unit tests: each runs inside a real backend started by `cargo pgrx test`, in a
//! transaction of its own. The SQL-level behaviour is covered by pg_test/ (pg_regress and
//! isolation); these pin the pieces those suites cannot reach directly.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn token(query: &str) -> i64 {
        Spi::get_one::<i64>(query)
            .expect("query runs")
            .expect("a token, not NULL")
    }

    #[pg_test]
    fn tokens_rise_across_keys_and_repeat_for_a_held_key() {
        let first = token("SELECT acquire_fenced(1, 1)");
        let second = token("SELECT acquire_fenced(1, 2)");
        assert!(second > first);
        assert_eq!(token("SELECT acquire_fenced(1, 1)"), first);
        assert_eq!(token("SELECT try_acquire_fenced(1, 2)"), second);
    }

    #[pg_test]
    fn timeouts_round_up_to_whole_milliseconds() {
        // One microsecond must still be a (1 ms) wait, never the "do not wait" of zero.
        let token = token("SELECT acquire_fenced(1, 3, '1 microsecond')");
        assert!(token > 0);
    }

    #[pg_test(error = "timeout must not be negative")]
    fn negative_timeout_is_refused() {
        token("SELECT acquire_fenced(1, 4, '-1 second')");
    }

    #[pg_test(error = "timeout must be at most 2147483647 ms")]
    fn timeout_beyond_lock_timeout_range_is_refused() {
        token("SELECT acquire_fenced(1, 5, '25 days')");
    }

    #[pg_test(error = "try_acquire_fenced: argument \"id\" must not be NULL")]
    fn null_key_is_an_error_not_a_busy_null() {
        token("SELECT try_acquire_fenced(1, NULL)");
    }

    #[pg_test]
    fn lock_is_the_builtin_two_int4_advisory_lock() {
        token("SELECT acquire_fenced(-7, 2147483647)");
        let shown = Spi::get_one::<String>(
            "SELECT format('%s/%s/%s/%s', classid, objid, objsubid, mode) FROM pg_locks \
             WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            shown,
            format!("{}/2147483647/2/ExclusiveLock", -7i32 as u32)
        );
    }

    #[pg_test]
    fn holder_detail_lists_pids_and_prepared_transactions() {
        use crate::errors::holders_detail;
        assert_eq!(holders_detail(&[42]), "Held by PID 42.");
        assert_eq!(
            holders_detail(&[0, 7]),
            "Held by a prepared transaction, PID 7."
        );
        assert!(holders_detail(&[]).starts_with("No session holds the key"));
    }

    #[pg_test]
    fn sqlstates_are_encoded_like_postgres_codes() {
        // SF001 is raised through this encoding, so it must agree with PostgreSQL's own
        // (MAKE_SQLSTATE) on codes that PostgreSQL defines, letters included.
        use crate::errors::make_sqlstate;
        use pgrx::PgSqlErrorCode::*;
        assert_eq!(
            make_sqlstate(b"22004"),
            ERRCODE_NULL_VALUE_NOT_ALLOWED as i32
        );
        assert_eq!(make_sqlstate(b"55P03"), ERRCODE_LOCK_NOT_AVAILABLE as i32);
        assert_eq!(make_sqlstate(b"XX000"), ERRCODE_INTERNAL_ERROR as i32);
    }

    #[pg_test]
    fn grants_are_published_when_preloaded() {
        // The pgrx test server preloads fenced_lock (pg_test::postgresql_conf_options).
        assert_eq!(
            Spi::get_one::<bool>("SELECT fenced_lock_internal.fenced_lock_grants_available()"),
            Ok(Some(true))
        );
        let token = token("SELECT acquire_fenced(31, 7)");
        let published = Spi::get_one::<i64>(
            "SELECT token FROM fenced_lock_internal.fenced_lock_grants() WHERE pid = pg_backend_pid() AND ns = 31 AND id = 7",
        );
        assert_eq!(published, Ok(Some(token)));
    }
}
