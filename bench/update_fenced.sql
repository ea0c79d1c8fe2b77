\set id random(1, 100000)
SELECT fenced_update_or_false('bench_updates_fenced', :id::int, 1000, '{"payload": "x"}');
