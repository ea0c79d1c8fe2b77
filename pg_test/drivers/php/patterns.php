<?php
// The driver suite's patterns, run by PHP's pgsql extension (pg_send_query_params: unnamed
// statements, untyped parameters) or by PDO (pdo_pgsql), directly and through PgBouncer in
// transaction mode; and the mixed workload through PgBouncer (run.sh says what it checks).
//     php patterns.php DRIVER ROUTE               (DRIVER: pgsql | pdo; ROUTE: direct | pooled)
//     php patterns.php DRIVER mixed SETTINGS N    (SETTINGS: documented | defaults; N: process)
// pgsql returns every value as a string ("f" is truthy, "9" > "10"): the patterns compare
// booleans with 't' and tokens as (int). Behind the pooler PDO needs emulated prepares (the
// README's setting): its default prepares each statement on the server under a name another
// client can reach.
[$script, $driver, $route] = $argv;
$settings = $argv[3] ?? null;
$pooled = $route !== 'direct';
$documented = $route === 'pooled' || ($route === 'mixed' && $settings === 'documented');
$base = ['pgsql' => 2000, 'pdo' => 2200][$driver] + ($route === 'pooled' ? 100 : 0);
$name = $driver === 'pgsql' ? 'php-pgsql' : 'php-pdo';

class Failure extends Exception {}

// A connection with one(), sqlstate_of() and the driver's answers turned into PHP values the
// way the README says: booleans and tokens as their types.
abstract class Conn {
    abstract function one(string $sql, ...$params);
    abstract function sqlstate_of(string $sql, ...$params): ?string;
    abstract function bool($value): bool;
    function token($value): ?int { return $value === null ? null : (int) $value; }
}

class PgsqlConn extends Conn {
    public $conn;
    function __construct(string $host, string $port) {
        $this->conn = pg_connect("host=$host port=$port dbname=" . getenv('DRIVERS_DATABASE')
            . " user=postgres", PGSQL_CONNECT_FORCE_NEW);
    }
    // Returns the first column of the first row, or raises Failure with the SQLSTATE.
    function one(string $sql, ...$params) {
        pg_send_query_params($this->conn, $sql, $params);
        $result = pg_get_result($this->conn);
        while (pg_get_result($this->conn)) {}
        $state = pg_result_error_field($result, PGSQL_DIAG_SQLSTATE);
        if ($state) throw new Failure(pg_result_error($result));
        return pg_num_rows($result) && pg_num_fields($result) ? pg_fetch_result($result, 0, 0) : null;
    }
    function sqlstate_of(string $sql, ...$params): ?string {
        pg_send_query_params($this->conn, $sql, $params);
        $result = pg_get_result($this->conn);
        while (pg_get_result($this->conn)) {}
        return pg_result_error_field($result, PGSQL_DIAG_SQLSTATE) ?: null;
    }
    function bool($value): bool {
        if ($value !== 't' && $value !== 'f') throw new Failure("not a boolean: " . var_export($value, true));
        return $value === 't';
    }
    function close() { pg_close($this->conn); }
}

class PdoConn extends Conn {
    public $pdo;
    function __construct(string $host, string $port, bool $emulate) {
        $this->pdo = new PDO("pgsql:host=$host;port=$port;dbname=" . getenv('DRIVERS_DATABASE'),
            'postgres', null, [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
                               PDO::ATTR_EMULATE_PREPARES => $emulate]);
    }
    function one(string $sql, ...$params) {
        // PDO's placeholders are ?; the SQL is written with $1, $2, ... in order.
        $statement = $this->pdo->prepare(preg_replace('/\$\d+/', '?', $sql));
        $statement->execute($params);
        // Not fetchColumn(): it returns false both for a false value and for no row.
        $row = $statement->columnCount() ? $statement->fetch(PDO::FETCH_NUM) : false;
        return $row === false ? null : $row[0];
    }
    function sqlstate_of(string $sql, ...$params): ?string {
        try { $this->one($sql, ...$params); } catch (PDOException $e) { return $e->getCode(); }
        return null;
    }
    function bool($value): bool {
        if (!is_bool($value)) throw new Failure("not a boolean: " . var_export($value, true));
        return $value;
    }
    function close() { $this->pdo = null; }
}

function connect(): Conn {
    global $driver, $pooled, $documented;
    $host = getenv($pooled ? 'DRIVERS_POOLED_HOST' : 'DRIVERS_HOST');
    $port = getenv($pooled ? 'DRIVERS_POOLED_PORT' : 'DRIVERS_PORT');
    return $driver === 'pgsql' ? new PgsqlConn($host, $port) : new PdoConn($host, $port, $documented);
}

function check(bool $condition, string $message) { if (!$condition) throw new Failure($message); }
function show($value): string { return var_export($value, true); }

$patterns = [
    'guarded_write' => function (Conn $a) use ($base, $route, $name) {
        $changes = json_encode(['v' => "$name $route"]);
        $a->one('BEGIN');
        $token = $a->token($a->one('SELECT acquire_fenced($1, $2)', 4201, $base + 1));
        $written = $a->one('SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', $base + 1, $token, $changes);
        $a->one('COMMIT');
        check($token > 0, 'token ' . show($token));
        check($a->bool($written) === true, 'fenced_update returned ' . show($written));
        $stale = $a->one('SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', $base + 1, $token - 1, $changes);
        check($a->bool($stale) === false, 'a lower token wrote: ' . show($stale));
        // pgsql's refusal is the string "f": truthy unless compared.
        check(!($a instanceof PgsqlConn) || $stale === 'f', 'pgsql gave ' . show($stale));
        $state = $a->sqlstate_of('SELECT fenced_update($1, $2, $3, $4)', 'driver_rows', $base + 1,
            $token - 1, $changes);
        check($state === 'SF001', "fenced_update_strict with a lower token: SQLSTATE $state");
    },
    'skip_if_busy' => function (Conn $a, Conn $b) use ($base) {
        $a->one('BEGIN');
        $a->one('SELECT acquire_fenced($1, $2)', 4201, $base + 2);
        $b->one('BEGIN');
        $busy = $b->one('SELECT try_acquire_fenced($1, $2)', 4201, $base + 2);
        $b->one('ROLLBACK');
        $a->one('ROLLBACK');
        check($busy === null, 'try_acquire_fenced on a held key returned ' . show($busy));
    },
    'bounded_wait' => function (Conn $a, Conn $b) use ($base) {
        $a->one('BEGIN');
        $a->one('SELECT acquire_fenced($1, $2)', 4201, $base + 2);
        $b->one('BEGIN');
        $state = $b->sqlstate_of('SELECT acquire_fenced($1, $2, $3)', 4201, $base + 2, '100 milliseconds');
        $b->one('ROLLBACK');
        $a->one('ROLLBACK');
        check($state === '55P03', "SQLSTATE $state");
    },
    'stale_write' => function (Conn $a) use ($base, $route, $name) {
        $a->one('BEGIN');
        $older = $a->one('SELECT acquire_fenced($1, $2)', 4201, $base + 3);
        $newer = $a->one('SELECT acquire_fenced($1, $2)', 4201, $base + 4);
        $a->one('COMMIT');
        $resource = "drivers/$name/$route";
        $a->one('SELECT fence_check($1, $2)', $resource, $newer);
        $state = $a->sqlstate_of('SELECT fence_check($1, $2)', $resource, $older);
        check($state === 'SF001', "SQLSTATE $state");
    },
    'named_and_bigint' => function (Conn $a) use ($base) {
        $big = 5000000000 + $base;
        $a->one('BEGIN');
        $named = $a->token($a->one('SELECT acquire_fenced_named($1, $2)', 'drivers', "order:$base"));
        $by_bigint = $a->token($a->one('SELECT acquire_fenced_named($1, $2::bigint::text)', 'drivers', $big));
        $by_text = $a->token($a->one('SELECT acquire_fenced_named($1, $2)', 'drivers', (string) $big));
        $a->one('COMMIT');
        check($by_bigint === $by_text, 'a bigint key and its text are different locks');
        check($named !== $by_bigint, 'two keys shared a grant');
    },
    'autocommit' => function (Conn $a) use ($base) {
        $state = $a->sqlstate_of('SELECT acquire_fenced($1, $2)', 4201, $base + 5);
        check($state === '25P01', "SQLSTATE $state");
    },
    'lease' => function (Conn $a, Conn $b) use ($base) {
        [$key, $ttl] = [$base + 7, '30 seconds'];
        $token = $a->token($a->one('SELECT try_acquire_lease($1, $2, $3, $4)', 4203, $key, 'a', $ttl));
        $busy = $b->one('SELECT try_acquire_lease($1, $2, $3, $4)', 4203, $key, 'b', $ttl);
        $expiry = $a->one('SELECT renew_lease($1, $2, $3, $4)', 4203, $key, $token, $ttl);
        $released = $a->one('SELECT release_lease($1, $2, $3)', 4203, $key, $token);
        $taken = $b->token($b->one('SELECT try_acquire_lease($1, $2, $3, $4)', 4203, $key, 'b', $ttl));
        $b->one('SELECT release_lease($1, $2, $3)', 4203, $key, $taken);
        check($token > 0, 'token ' . show($token));
        check($busy === null, 'another owner got ' . show($busy));
        check(strtotime($expiry) > time(), 'renew returned ' . show($expiry));
        check($a->bool($released) && $taken > $token, 'released ' . show($released) . ', next ' . show($taken));
    },
    'leader_owner' => function (Conn $a, Conn $b) use ($base, $pooled) {
        $key = $base + 9;
        $term = $a->token($a->one('SELECT try_acquire_fenced_session($1, $2, $3)', 4203, $key, 'client-a'));
        $other = $b->one('SELECT try_acquire_fenced_session($1, $2, $3)', 4203, $key, 'client-b');
        check($term > 0, 'term ' . show($term));
        check($other === null, 'a second owner became leader with term ' . show($other));
        if (!$pooled) {
            $released = $a->one('SELECT release_fenced($1, $2, $3)', 4203, $key, 'client-a');
            check($a->bool($released), 'released ' . show($released));
        }
    },
    'permits' => function (Conn $a, Conn $b) use ($base) {
        // One permit: a slot and a token as a row; the other client's try gets no row (count
        // 0), never a NULL row; after the holder's commit, a larger token.
        $key = $base + 13;
        $a->one('BEGIN');
        $slot = $a->one('SELECT slot FROM acquire_permit($1, $2, $3)', 4206, $key, 1);
        $token = $a->token($a->one('SELECT token FROM acquire_permit($1, $2, $3)', 4206, $key, 1));
        $b->one('BEGIN');
        $none = $b->one('SELECT count(*) FROM try_acquire_permit($1, $2, $3)', 4206, $key, 1);
        $b->one('ROLLBACK');
        $a->one('COMMIT');
        $b->one('BEGIN');
        $later = $b->token($b->one('SELECT token FROM try_acquire_permit($1, $2, $3)', 4206, $key, 1));
        $b->one('COMMIT');
        check($slot !== null && (int) $slot === 1 && $token > 0, 'slot ' . show($slot) . ', token ' . show($token));
        check($none !== null && (int) $none === 0, 'a second holder of one permit: ' . show($none));
        check($later !== null && $later > $token, 'next token ' . show($later));
    },
    'lease_permit' => function (Conn $a, Conn $b) use ($base) {
        // A permit as a lease: every call commits on its own, so it works through the pooler.
        [$key, $ttl] = [$base + 14, '30 seconds'];
        $acquire = 'SELECT token FROM try_acquire_lease_permit($1, $2, $3, $4, $5)';
        $token = $a->token($a->one($acquire, 4206, $key, 1, 'a', $ttl));
        $none = $b->one('SELECT count(*) FROM try_acquire_lease_permit($1, $2, $3, $4, $5)', 4206, $key, 1, 'b', $ttl);
        $expiry = $a->one('SELECT renew_lease($1, $2, $3, $4)', 4206, $key, $token, $ttl);
        $released = $a->one('SELECT release_lease($1, $2, $3)', 4206, $key, $token);
        $taken = $b->token($b->one('SELECT token FROM acquire_lease_permit($1, $2, $3, $4, $5, $6)', 4206, $key,
            1, 'b', $ttl, '5 seconds'));
        $b->one('SELECT release_lease($1, $2, $3)', 4206, $key, $taken);
        check($token > 0, 'token ' . show($token));
        check($none !== null && (int) $none === 0, 'another owner got a permit: ' . show($none));
        check(strtotime($expiry) > time(), 'renew returned ' . show($expiry));
        check($a->bool($released) && $taken !== null && $taken > $token,
            'released ' . show($released) . ', next ' . show($taken));
    },
    'shared_lock' => function (Conn $a, Conn $b) use ($base) {
        // Two readers at once, each with its own token; a writer's try is busy (NULL).
        $key = $base + 15;
        $a->one('BEGIN');
        $b->one('BEGIN');
        $first = $a->token($a->one('SELECT acquire_fenced($1, $2, shared => true)', 4206, $key));
        $second = $b->token($b->one('SELECT try_acquire_fenced($1, $2, shared => true)', 4206, $key));
        $b->one('ROLLBACK');
        $b->one('BEGIN');
        $busy = $b->one('SELECT try_acquire_fenced($1, $2)', 4206, $key);
        $b->one('ROLLBACK');
        $a->one('COMMIT');
        check($first !== null && $second !== null && $second > $first,
            "readers' tokens " . show($first) . ', ' . show($second));
        check($busy === null, 'a writer got ' . show($busy) . ' beside a reader');
    },
    'session_lease' => function (Conn $a) use ($base) {
        $token = $a->token($a->one('SELECT acquire_fenced_session($1, $2)', 4201, $base + 6));
        $held = $a->token($a->one('SELECT current_fence($1, $2)', 4201, $base + 6));
        $released = $a->one('SELECT release_fenced($1, $2)', 4201, $base + 6);
        check($held === $token && $a->bool($released), 'held ' . show($held));
    },
];

const HELD = 'SELECT token FROM fenced_locks WHERE ns = $1 AND id = $2 AND pid = pg_backend_pid()';

// One transaction of the mixed workload; returns what was wrong with its answers, or null.
function mixed_transaction(Conn $conn, string $kind, int $key, int $row): ?string {
    $problem = null;
    $conn->one('BEGIN');
    if ($kind === 'acquire' || $kind === 'try') {
        $function = $kind === 'acquire' ? 'acquire_fenced' : 'try_acquire_fenced';
        $token = $conn->one("SELECT $function(\$1, \$2)", 4205, $key);
        $held = $conn->one(HELD, 4205, $key);
        if (!(is_numeric($token) && $token > 0 && $held !== null && $conn->token($held) === $conn->token($token)))
            $problem = "$function gave " . show($token) . ', fenced_locks shows ' . show($held);
    } elseif ($kind === 'current') {
        $fence = $conn->one('SELECT current_fence($1, $2)', 4205, $key);
        if ($fence !== null) $problem = 'current_fence of a free key gave ' . show($fence);
    } elseif ($kind === 'leader') {
        $term = $conn->one('SELECT try_acquire_fenced_session($1, $2, $3)', 4205, $key, "owner-$key");
        $released = $conn->one('SELECT release_fenced($1, $2, $3)', 4205, $key, "owner-$key");
        if (!(is_numeric($term) && $term > 0 && $released !== null && $conn->bool($released)))
            $problem = 'try_acquire_fenced_session gave ' . show($term) . ', release_fenced ' . show($released);
    } else {
        $token = $conn->one('SELECT acquire_fenced($1, $2)', 4205, $key);
        $written = $conn->one('SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', $row, $token,
            json_encode(['v' => "$key"]));
        if ($written === null || !$conn->bool($written))
            $problem = 'fenced_update with token ' . show($token) . ' gave ' . show($written);
    }
    $conn->one('COMMIT');
    return $problem;
}

function run_mixed(string $settings, int $process): bool {
    global $name;
    $slot = (int) getenv('MIXED_SLOT');
    $conns = [];
    for ($i = 0; $i < 6; $i++) $conns[] = connect();
    mt_srand($process);
    [$wrong, $errors, $first] = [0, 0, null];
    for ($i = 0; $i < 150; $i++) {
        $conn = $conns[mt_rand(0, 5)];
        $kind = ['acquire', 'try', 'current', 'leader', 'update'][mt_rand(0, 4)];
        $key = $slot * 10000 + $process * 1000 + $i;
        try {
            $problem = mixed_transaction($conn, $kind, $key, $slot * 20 + $process * 10 + $i % 10 + 3001);
            if ($problem !== null) $wrong++;
        } catch (Throwable $e) {
            $errors++;
            $problem = 'SQLSTATE ' . ($e instanceof PDOException ? $e->getCode() : '?') . ': '
                . strtok($e->getMessage(), "\n");
            try { $conn->one('ROLLBACK'); } catch (Throwable $ignored) {}
        }
        if ($problem !== null && $first === null) $first = "$kind: $problem";
    }
    foreach ($conns as $conn) $conn->close();
    echo "$name mixed $settings p$process: 150 transactions, $wrong wrong, $errors errors"
        . ($first !== null ? "; first: $first" : '') . "\n";
    return $wrong === 0 && $errors === 0;
}

function run_patterns(array $patterns): bool {
    global $name, $route, $pooled;
    [$a, $b] = [connect(), connect()];
    $failed = 0;
    foreach ($patterns as $pattern => $run) {
        // Session-scoped locks belong to one server connection: not through a transaction pooler.
        if ($pooled && $pattern === 'session_lease') continue;
        try {
            $run($a, $b);
            echo "$name $route $pattern: ok\n";
        } catch (Throwable $e) {
            $failed++;
            echo "$name $route $pattern: FAILED: " . strtok($e->getMessage(), "\n") . "\n";
            foreach ([$a, $b] as $conn) { try { $conn->one('ROLLBACK'); } catch (Throwable $ignored) {} }
        }
    }
    $a->close();
    $b->close();
    return $failed === 0;
}

exit(($route === 'mixed' ? run_mixed($settings, (int) $argv[4]) : run_patterns($patterns)) ? 0 : 1);
