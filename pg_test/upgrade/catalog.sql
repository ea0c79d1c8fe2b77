-- Every object of the extension as the catalog describes it, one line each, sorted: what
-- must be equal between a database upgraded from 0.1.0 and a fresh install (upgrade.sh diffs
-- the two). Functions with signature, definition (language, symbol or body, volatility,
-- parallel safety, security, settings), privileges and comment; relations with columns,
-- defaults, constraints, indexes, view definition, privileges and comment; what pg_dump keeps.
-- And each member's initial privileges (pg_init_privs): pg_dump writes a member's privileges
-- as changes from those, so they must be the install scripts' own, not a DBA's.
\pset tuples_only on
\pset format unaligned
WITH members AS (
    SELECT d.classid, d.objid
      FROM pg_catalog.pg_depend d
     WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass AND d.deptype = 'e'
       AND d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'fenced_lock')
)
SELECT line FROM (
    SELECT pg_catalog.format('function %s: %s acl=%s comment=%s',
               p.oid::regprocedure, pg_catalog.pg_get_functiondef(p.oid), p.proacl,
               pg_catalog.obj_description(p.oid, 'pg_proc')) AS line
      FROM members m JOIN pg_catalog.pg_proc p ON m.classid = 'pg_catalog.pg_proc'::regclass
                                             AND p.oid = m.objid
    UNION ALL
    SELECT pg_catalog.format('relation %s kind=%s persistence=%s acl=%s comment=%s view=%s',
               c.relname, c.relkind, c.relpersistence, c.relacl,
               pg_catalog.obj_description(c.oid, 'pg_class'),
               CASE WHEN c.relkind = 'v' THEN pg_catalog.pg_get_viewdef(c.oid) END)
      FROM members m JOIN pg_catalog.pg_class c ON m.classid = 'pg_catalog.pg_class'::regclass
                                              AND c.oid = m.objid
    UNION ALL
    SELECT pg_catalog.format('column %s.%s #%s %s notnull=%s default=%s acl=%s',
               c.relname, a.attname, a.attnum, pg_catalog.format_type(a.atttypid, a.atttypmod),
               a.attnotnull, pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), a.attacl)
      FROM members m JOIN pg_catalog.pg_class c ON m.classid = 'pg_catalog.pg_class'::regclass
                                              AND c.oid = m.objid
      JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
    UNION ALL
    SELECT pg_catalog.format('constraint %s on %s: %s', co.conname, c.relname,
               pg_catalog.pg_get_constraintdef(co.oid))
      FROM members m JOIN pg_catalog.pg_class c ON m.classid = 'pg_catalog.pg_class'::regclass
                                              AND c.oid = m.objid
      JOIN pg_catalog.pg_constraint co ON co.conrelid = c.oid
    UNION ALL
    SELECT pg_catalog.format('index on %s: %s', c.relname, pg_catalog.pg_get_indexdef(i.indexrelid))
      FROM members m JOIN pg_catalog.pg_class c ON m.classid = 'pg_catalog.pg_class'::regclass
                                              AND c.oid = m.objid
      JOIN pg_catalog.pg_index i ON i.indrelid = c.oid
    UNION ALL
    SELECT pg_catalog.format('sequence %s: %s %s %s %s %s cycle=%s', c.relname, s.seqtypid::regtype,
               s.seqstart, s.seqincrement, s.seqmax, s.seqcache, s.seqcycle)
      FROM members m JOIN pg_catalog.pg_class c ON m.classid = 'pg_catalog.pg_class'::regclass
                                              AND c.oid = m.objid
      JOIN pg_catalog.pg_sequence s ON s.seqrelid = c.oid
    UNION ALL
    SELECT pg_catalog.format('initial privileges of %s (%s): %s',
               pg_catalog.pg_describe_object(i.classoid, i.objoid, i.objsubid), i.privtype,
               (SELECT pg_catalog.array_agg(x::text ORDER BY x::text)
                  FROM pg_catalog.unnest(i.initprivs) x))
      FROM members m JOIN pg_catalog.pg_init_privs i ON i.classoid = m.classid AND i.objoid = m.objid
    UNION ALL
    SELECT pg_catalog.format('member of another kind: %s', pg_catalog.pg_describe_object(m.classid, m.objid, 0))
      FROM members m
     WHERE m.classid NOT IN ('pg_catalog.pg_proc'::regclass, 'pg_catalog.pg_class'::regclass)
    UNION ALL
    SELECT pg_catalog.format('extension %s version=%s relocatable=%s dumped=%s', e.extname,
               e.extversion, e.extrelocatable,
               (SELECT pg_catalog.array_agg(x::regclass::text ORDER BY x::regclass::text)
                  FROM pg_catalog.unnest(e.extconfig) x))
      FROM pg_catalog.pg_extension e WHERE e.extname = 'fenced_lock'
) catalog
ORDER BY line;
