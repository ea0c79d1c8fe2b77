# The driver suite's patterns, run by Perl's DBD::Pg with statements prepared once and
# executed again (prepare_cached), parameters untyped, directly and through PgBouncer in
# transaction mode; and the mixed workload through PgBouncer (run.sh says what it checks).
#     perl patterns.pl ROUTE                   (ROUTE: direct | pooled)
#     perl patterns.pl mixed SETTINGS N        (SETTINGS: documented | defaults; N: process)
# Behind the pooler the README's setting is pg_server_prepare => 0: DBD::Pg's default prepares
# a statement on the server at its second execution, under a name another client can reach.
use strict;
use warnings;
use DBI;
use JSON::PP qw(encode_json);

my ($route, $settings, $process) = @ARGV;
my $pooled = $route ne 'direct';
my $documented = $route eq 'pooled' || ($route eq 'mixed' && $settings eq 'documented');
my $base = $route eq 'pooled' ? 1900 : 1800;
my $driver = 'DBD::Pg';

sub connect_db {
    my ($host, $port) = $pooled
        ? @ENV{qw(DRIVERS_POOLED_HOST DRIVERS_POOLED_PORT)}
        : @ENV{qw(DRIVERS_HOST DRIVERS_PORT)};
    return DBI->connect("dbi:Pg:dbname=$ENV{DRIVERS_DATABASE};host=$host;port=$port",
        'postgres', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0,
                          ($documented ? (pg_server_prepare => 0) : ()) });
}

# BEGIN, COMMIT and ROLLBACK are DBI's begin_work, commit and rollback.
sub one {
    my ($dbh, $sql, @params) = @_;
    return $dbh->begin_work if $sql eq 'BEGIN';
    return $dbh->commit if $sql eq 'COMMIT';
    return $dbh->rollback if $sql eq 'ROLLBACK';
    my $sth = $dbh->prepare_cached($sql);
    $sth->execute(@params);
    my @row = $sth->fetchrow_array;
    $sth->finish;
    return $row[0];
}

sub sqlstate_of {
    my ($dbh, $sql, @params) = @_;
    return eval { one($dbh, $sql, @params); 1 } ? undef : $dbh->state;
}

sub check { die "$_[1]\n" unless $_[0] }
sub show { defined $_[0] ? "'$_[0]'" : 'undef' }

my %patterns = (
    guarded_write => sub {
        my ($a) = @_;
        my $changes = encode_json({ v => "DBD::Pg $route" });
        one($a, 'BEGIN');
        my $token = one($a, 'SELECT acquire_fenced($1, $2)', 4201, $base + 1);
        my $written = one($a, 'SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', $base + 1,
            $token, $changes);
        one($a, 'COMMIT');
        check(defined $token && $token =~ /^\d+$/ && $token > 0, 'token ' . show($token));
        # Booleans arrive as 1 and 0.
        check(defined $written && $written eq '1', 'fenced_update returned ' . show($written));
        my $stale = one($a, 'SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', $base + 1,
            $token - 1, $changes);
        check(defined $stale && $stale eq '0', 'a lower token wrote: ' . show($stale));
        my $state = sqlstate_of($a, 'SELECT fenced_update($1, $2, $3, $4)', 'driver_rows',
            $base + 1, $token - 1, $changes);
        check($state eq 'SF001', "fenced_update_strict with a lower token: SQLSTATE $state");
    },
    skip_if_busy => sub {
        my ($a, $b) = @_;
        one($a, 'BEGIN');
        one($a, 'SELECT acquire_fenced($1, $2)', 4201, $base + 2);
        one($b, 'BEGIN');
        my $busy = one($b, 'SELECT try_acquire_fenced($1, $2)', 4201, $base + 2);
        one($b, 'ROLLBACK');
        one($a, 'ROLLBACK');
        check(!defined $busy, 'try_acquire_fenced on a held key returned ' . show($busy));
    },
    bounded_wait => sub {
        my ($a, $b) = @_;
        one($a, 'BEGIN');
        one($a, 'SELECT acquire_fenced($1, $2)', 4201, $base + 2);
        one($b, 'BEGIN');
        my $state = sqlstate_of($b, 'SELECT acquire_fenced($1, $2, $3)', 4201, $base + 2,
            '100 milliseconds');
        one($b, 'ROLLBACK');
        one($a, 'ROLLBACK');
        check($state eq '55P03', "SQLSTATE $state");
    },
    stale_write => sub {
        my ($a) = @_;
        one($a, 'BEGIN');
        my $older = one($a, 'SELECT acquire_fenced($1, $2)', 4201, $base + 3);
        my $newer = one($a, 'SELECT acquire_fenced($1, $2)', 4201, $base + 4);
        one($a, 'COMMIT');
        my $resource = "drivers/DBD::Pg/$route";
        one($a, 'SELECT fence_check($1, $2)', $resource, $newer);
        my $state = sqlstate_of($a, 'SELECT fence_check($1, $2)', $resource, $older);
        check($state eq 'SF001', "SQLSTATE $state");
    },
    named_and_bigint => sub {
        my ($a) = @_;
        my $big = 5_000_000_000 + $base;
        one($a, 'BEGIN');
        my $named = one($a, 'SELECT acquire_fenced_named($1, $2)', 'drivers', "order:$base");
        my $by_bigint = one($a, 'SELECT acquire_fenced_named($1, $2::bigint::text)', 'drivers', $big);
        my $by_text = one($a, 'SELECT acquire_fenced_named($1, $2)', 'drivers', "$big");
        one($a, 'COMMIT');
        check($by_bigint == $by_text, 'a bigint key and its text are different locks');
        check($named != $by_bigint, 'two keys shared a grant');
    },
    autocommit => sub {
        my ($a) = @_;
        my $state = sqlstate_of($a, 'SELECT acquire_fenced($1, $2)', 4201, $base + 5);
        check($state eq '25P01', "SQLSTATE $state");
    },
    lease => sub {
        my ($a, $b) = @_;
        my ($key, $ttl) = ($base + 7, '30 seconds');
        my $token = one($a, 'SELECT try_acquire_lease($1, $2, $3, $4)', 4203, $key, 'a', $ttl);
        my $busy = one($b, 'SELECT try_acquire_lease($1, $2, $3, $4)', 4203, $key, 'b', $ttl);
        my $expiry = one($a, 'SELECT renew_lease($1, $2, $3, $4)', 4203, $key, $token, $ttl);
        my $released = one($a, 'SELECT release_lease($1, $2, $3)', 4203, $key, $token);
        my $taken = one($b, 'SELECT try_acquire_lease($1, $2, $3, $4)', 4203, $key, 'b', $ttl);
        one($b, 'SELECT release_lease($1, $2, $3)', 4203, $key, $taken);
        check(defined $token && $token > 0, 'token ' . show($token));
        check(!defined $busy, 'another owner got ' . show($busy));
        check(defined $expiry && $expiry =~ /^\d{4}-\d\d-\d\d /, 'renew returned ' . show($expiry));
        check($released eq '1' && $taken > $token, 'released ' . show($released));
    },
    leader_owner => sub {
        my ($a, $b) = @_;
        my $key = $base + 9;
        my $term = one($a, 'SELECT try_acquire_fenced_session($1, $2, $3)', 4203, $key, 'client-a');
        my $other = one($b, 'SELECT try_acquire_fenced_session($1, $2, $3)', 4203, $key, 'client-b');
        check(defined $term && $term > 0, 'term ' . show($term));
        check(!defined $other, 'a second owner became leader with term ' . show($other));
        if (!$pooled) {
            my $released = one($a, 'SELECT release_fenced($1, $2, $3)', 4203, $key, 'client-a');
            check($released eq '1', 'released ' . show($released));
        }
    },
    permits => sub {
        # One permit: a slot and a token as a row; the other client's try gets no row (count
        # 0), never a NULL row; after the holder's commit, a larger token.
        my ($a, $b) = @_;
        my $key = $base + 13;
        one($a, 'BEGIN');
        my $slot = one($a, 'SELECT slot FROM acquire_permit($1, $2, $3)', 4206, $key, 1);
        my $token = one($a, 'SELECT token FROM acquire_permit($1, $2, $3)', 4206, $key, 1);
        one($b, 'BEGIN');
        my $none = one($b, 'SELECT count(*) FROM try_acquire_permit($1, $2, $3)', 4206,
            $key, 1);
        one($b, 'ROLLBACK');
        one($a, 'COMMIT');
        one($b, 'BEGIN');
        my $later = one($b, 'SELECT token FROM try_acquire_permit($1, $2, $3)', 4206,
            $key, 1);
        one($b, 'COMMIT');
        check(defined $slot && $slot == 1 && defined $token && $token > 0,
            'slot ' . show($slot) . ', token ' . show($token));
        check(defined $none && $none == 0, 'a second holder of one permit: ' . show($none));
        check(defined $later && $later > $token, 'next token ' . show($later));
    },
    lease_permit => sub {
        # A permit as a lease: every call commits on its own, so it works through the pooler.
        my ($a, $b) = @_;
        my ($key, $ttl) = ($base + 14, '30 seconds');
        my $acquire = 'SELECT token FROM try_acquire_lease_permit($1, $2, $3, $4, $5)';
        my $token = one($a, $acquire, 4206, $key, 1, 'a', $ttl);
        my $none = one($b, 'SELECT count(*) FROM try_acquire_lease_permit($1, $2, $3, $4, $5)', 4206,
            $key, 1, 'b', $ttl);
        my $expiry = one($a, 'SELECT renew_lease($1, $2, $3, $4)', 4206, $key, $token, $ttl);
        my $released = one($a, 'SELECT release_lease($1, $2, $3)', 4206, $key, $token);
        my $taken = one($b, 'SELECT token FROM acquire_lease_permit($1, $2, $3, $4, $5, $6)',
            4206, $key, 1, 'b', $ttl, '5 seconds');
        one($b, 'SELECT release_lease($1, $2, $3)', 4206, $key, $taken);
        check(defined $token && $token > 0, 'token ' . show($token));
        check(defined $none && $none == 0, 'another owner got a permit: ' . show($none));
        check(defined $expiry && $expiry =~ /^\d{4}-\d\d-\d\d /, 'renew returned ' . show($expiry));
        check($released eq '1' && defined $taken && $taken > $token,
            'released ' . show($released) . ', next token ' . show($taken));
    },
    shared_lock => sub {
        # Two readers at once, each with its own token; a writer's try is busy (NULL).
        my ($a, $b) = @_;
        my $key = $base + 15;
        one($a, 'BEGIN');
        one($b, 'BEGIN');
        my $first = one($a, 'SELECT acquire_fenced($1, $2, shared => true)', 4206, $key);
        my $second = one($b, 'SELECT try_acquire_fenced($1, $2, shared => true)', 4206, $key);
        one($b, 'ROLLBACK');
        one($b, 'BEGIN');
        my $busy = one($b, 'SELECT try_acquire_fenced($1, $2)', 4206, $key);
        one($b, 'ROLLBACK');
        one($a, 'COMMIT');
        check(defined $first && defined $second && $second > $first,
            "readers' tokens " . show($first) . ', ' . show($second));
        check(!defined $busy, 'a writer got ' . show($busy) . ' beside a reader');
    },
    session_lease => sub {
        my ($a) = @_;
        my $token = one($a, 'SELECT acquire_fenced_session($1, $2)', 4201, $base + 6);
        my $held = one($a, 'SELECT current_fence($1, $2)', 4201, $base + 6);
        my $released = one($a, 'SELECT release_fenced($1, $2)', 4201, $base + 6);
        check($held == $token && $released eq '1', 'held ' . show($held));
    },
);
my @order = qw(guarded_write skip_if_busy bounded_wait stale_write named_and_bigint autocommit
    lease leader_owner permits lease_permit shared_lock session_lease);

my $held = 'SELECT token FROM fenced_locks WHERE ns = $1 AND id = $2 AND pid = pg_backend_pid()';

# One transaction of the mixed workload; returns what was wrong with its answers, or undef.
sub mixed_transaction {
    my ($dbh, $kind, $key, $row) = @_;
    my $problem;
    one($dbh, 'BEGIN');
    if ($kind eq 'acquire' || $kind eq 'try') {
        my $function = $kind eq 'acquire' ? 'acquire_fenced' : 'try_acquire_fenced';
        my $token = one($dbh, "SELECT $function(\$1, \$2)", 4205, $key);
        my $lock = one($dbh, $held, 4205, $key);
        $problem = "$function gave " . show($token) . ', fenced_locks shows ' . show($lock)
            unless defined $token && $token =~ /^\d+$/ && defined $lock && $lock == $token;
    } elsif ($kind eq 'current') {
        my $fence = one($dbh, 'SELECT current_fence($1, $2)', 4205, $key);
        $problem = 'current_fence of a free key gave ' . show($fence) if defined $fence;
    } elsif ($kind eq 'leader') {
        my $term = one($dbh, 'SELECT try_acquire_fenced_session($1, $2, $3)', 4205, $key, "owner-$key");
        my $released = one($dbh, 'SELECT release_fenced($1, $2, $3)', 4205, $key, "owner-$key");
        $problem = 'try_acquire_fenced_session gave ' . show($term) . ', release_fenced ' . show($released)
            unless defined $term && $term =~ /^\d+$/ && defined $released && $released eq '1';
    } else {
        my $token = one($dbh, 'SELECT acquire_fenced($1, $2)', 4205, $key);
        my $written = one($dbh, 'SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', $row,
            $token, encode_json({ v => "$key" }));
        $problem = 'fenced_update with token ' . show($token) . ' gave ' . show($written)
            unless defined $written && $written eq '1';
    }
    one($dbh, 'COMMIT');
    return $problem;
}

sub run_mixed {
    my $slot = $ENV{MIXED_SLOT};
    my @conns = map { connect_db() } 1 .. 6;
    srand($process);
    my ($wrong, $errors, $first) = (0, 0);
    for my $i (0 .. 149) {
        my $dbh = $conns[int rand 6];
        my $kind = (qw(acquire try current leader update))[int rand 5];
        my $key = $slot * 10000 + $process * 1000 + $i;
        my $problem = eval {
            my $found = mixed_transaction($dbh, $kind, $key, $slot * 20 + $process * 10 + $i % 10 + 3001);
            $wrong++ if defined $found;
            $found;
        };
        if (!defined $problem && $@) {
            $errors++;
            my $message = (split /\n/, $@)[0];
            $problem = 'SQLSTATE ' . ($dbh->state // '?') . ": $message";
            eval { $dbh->rollback };
        }
        $first //= "$kind: $problem" if defined $problem;
    }
    $_->disconnect for @conns;
    print "$driver mixed $settings p$process: 150 transactions, $wrong wrong, $errors errors"
        . (defined $first ? "; first: $first" : '') . "\n";
    return $wrong == 0 && $errors == 0;
}

sub run_patterns {
    my ($a, $b) = (connect_db(), connect_db());
    my $failed = 0;
    for my $name (@order) {
        # Session-scoped locks belong to one server connection: not through a transaction pooler.
        next if $pooled && $name eq 'session_lease';
        if (eval { $patterns{$name}->($a, $b); 1 }) {
            print "$driver $route $name: ok\n";
        } else {
            $failed++;
            my $why = (split /\n/, $@)[0];
            print "$driver $route $name: FAILED: $why\n";
            for my $dbh ($a, $b) { eval { $dbh->rollback } }
        }
    }
    $_->disconnect for $a, $b;
    return $failed == 0;
}

$| = 1;
exit(($route eq 'mixed' ? run_mixed() : run_patterns()) ? 0 : 1);
