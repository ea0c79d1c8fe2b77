\set id random(1, 100000)
SELECT bench_update_plpgsql(:id, 1000, 'x');
