-- The API as the catalog has it, as docs/api.md's reference lists it: every function of the
-- extension's schema (but the two behind its event trigger), one line each, with its
-- arguments, defaults, result and comment. scripts/readme-test.sh checks that docs/api.md
-- holds exactly this.
\pset tuples_only on
\pset format unaligned
SELECT pg_catalog.format('| `%s(%s)` | `%s` | %s |', p.proname,
           pg_catalog.pg_get_function_arguments(p.oid),
           pg_catalog.pg_get_function_result(p.oid),
           pg_catalog.replace(pg_catalog.obj_description(p.oid, 'pg_proc'), '|', '\|'))
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                             AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_catalog.pg_extension e ON d.refobjid = e.oid AND e.extname = 'fenced_lock'
 WHERE p.pronamespace = e.extnamespace
   AND p.proname NOT IN ('fenced_lock_keep_token_floor', 'fenced_lock_kept_token_floor')
 ORDER BY p.proname COLLATE "C", pg_catalog.pg_get_function_arguments(p.oid) COLLATE "C";
