-- Named keys in a database whose default collation is not C: sql-tests.sh runs this in one
-- database with an ICU collation (en-US) and one with libc's en_US.UTF-8. Names in mixed case
-- order differently there than in C, which the registry's index scan must follow.
SELECT datlocprovider = 'i' OR datcollate = 'en_US.UTF-8' AS collation_is_not_c
  FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database();
SELECT count(register_namespace(name, ns::int4))
  FROM unnest(ARRAY['alpha', 'Beta', 'gamma', 'Delta', 'epsilon', 'Zeta', 'eta', 'Theta',
                    'iota', 'Kappa', 'lambda', 'Mu', 'nu', 'Xi', 'omicron', 'Pi'])
       WITH ORDINALITY AS names(name, ns);
-- Every registered name is found, by every acquire form.
BEGIN;
SELECT count(*) FILTER (WHERE try_acquire_fenced_named(name, 'k') IS NOT NULL) AS found_by_try,
       count(*) FILTER (WHERE acquire_fenced_named(name, 'k2') > 0) AS found_by_acquire,
       count(*) FILTER (WHERE acquire_fenced_named(name, 'k3', '1s') > 0) AS found_by_timeout
  FROM fenced_namespaces;
-- ... as the key it was registered with.
SELECT count(*) AS keys_as_registered
  FROM fenced_locks l JOIN fenced_namespaces n USING (ns)
 WHERE l.granted AND l.namespace = n.name AND l.id = fenced_key('k');
COMMIT;
-- An unregistered name is still reported as one (42704), whatever its case.
BEGIN;
SELECT try_acquire_fenced_named('beta', 'k');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
