\set id random(1, 100000)
SELECT fenced_update('bench_updates_fenced', :id::int, 1000, '{"payload": "x"}');
