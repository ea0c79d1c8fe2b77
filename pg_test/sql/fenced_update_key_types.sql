-- fenced_update's text id (what untyped and JDBC parameters become) is read as the key
-- column's type without a length (third review of 0.3.0, item 1): a bare "character" is
-- character(1) and a bare "bit" is bit(1), so '12' read as either would match row '1' and
-- write it. Every key type whose bare name implies a length or precision, domains over them
-- and arrays of them: exactly the row a literal `WHERE id = '...'` matches is written, and
-- only through the text forms that drivers send.
\set VERBOSITY terse
CREATE TABLE acct (id char(4) PRIMARY KEY, fence bigint, note text);
INSERT INTO acct VALUES ('1'), ('12'), ('AB');
SELECT fenced_update_or_false('acct'::regclass, '12'::text, 10, '{"note": "for 12"}');
SELECT fenced_update('acct', '12', 11, '{"note": "strict 12"}');
SELECT fenced_update_or_false('acct'::regclass, 'AB'::varchar, 12, '{"note": "for AB"}');
SELECT fenced_update_or_false('acct', '1', 13, '{"note": "for 1"}');
SELECT id, fence, note FROM acct ORDER BY id;
-- A value longer than the column: no row matches it (as WHERE id = '12345' matches none).
SELECT fenced_update_or_false('acct', '12345', 14, '{"note": "none"}');
\echo :LAST_ERROR_SQLSTATE

-- One table per type: the id of the second row, given as text, writes that row alone.
CREATE DOMAIN code3 AS char(3);
CREATE DOMAIN bits4 AS bit(4);
CREATE FUNCTION key_type_writes(key_type text, ids text[], id text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    written text;
BEGIN
    EXECUTE format('CREATE TEMP TABLE k (id %s PRIMARY KEY, fence bigint, note text)', key_type);
    EXECUTE 'INSERT INTO k (id) SELECT unnest($1::text[])::' || key_type USING ids;
    PERFORM fenced_update_or_false('k', id, 7, '{"note": "written"}');
    PERFORM fenced_update('k', id::varchar, 8, '{"note": "written"}');
    EXECUTE 'SELECT string_agg(id::text || ''='' || fence, '', '' ORDER BY fence, id::text)
               FROM k WHERE note IS NOT NULL' INTO written;
    DROP TABLE k;
    RETURN written;
EXCEPTION WHEN OTHERS THEN
    RETURN 'ERROR ' || SQLSTATE || ': ' || SQLERRM;
END
$$;
SELECT key_type, key_type_writes(key_type, ids, id) AS written
  FROM (VALUES ('char(4)', '{1,12,AB}'::text[], '12'),
               ('bpchar', '{1,12}', '12'),
               ('"char"', '{a,b}', 'b'),
               ('varchar(2)', '{1,12}', '12'),
               ('code3', '{X,XYZ}', 'XYZ'),
               ('bit(4)', '{1010,0101}', '1010'),
               ('bits4', '{1010,0101}', '0101'),
               ('varbit(4)', '{1,10}', '10'),
               ('numeric(6,2)', '{1.2,1.23}', '1.23'),
               ('time(0)', '{10:00:00,10:00:01}', '10:00:01'),
               ('timetz(0)', '{10:00:00+00,10:00:01+00}', '10:00:01+00'),
               ('timestamp(0)', '{2026-01-01 10:00:00,2026-01-01 10:00:01}', '2026-01-01 10:00:01'),
               ('timestamptz(0)', '{2026-01-01 10:00:00+00,2026-01-01 10:00:01+00}',
                '2026-01-01 10:00:01+00'),
               ('interval(0)', '{1 second,2 seconds}', '2 seconds'),
               ('char(2)[]', '{"{1}","{12}"}', '{12}'),
               ('bit(2)[]', '{"{01}","{10}"}', '{10}'),
               ('code3[]', '{"{X}","{XYZ}"}', '{XYZ}')) AS t(key_type, ids, id);
DROP FUNCTION key_type_writes(text, text[], text);
DROP DOMAIN code3, bits4;
DROP TABLE acct;
