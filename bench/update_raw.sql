\set id random(1, 100000)
UPDATE bench_updates_raw SET payload = 'x', fence = 1000 WHERE id = :id AND fence <= 1000;
