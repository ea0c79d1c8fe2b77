# The driver suite's patterns, run by ruby-pg, which sends parameters untyped (exec_params,
# unnamed statements), directly and through PgBouncer in transaction mode; and the mixed
# workload through PgBouncer (run.sh says what it checks).
#     ruby patterns.rb ROUTE               (ROUTE: direct | pooled)
#     ruby patterns.rb mixed documented N  (N: the process)
# ruby-pg returns every value as a string ("f" is truthy, "9" > "10") unless results are
# decoded: the suite decodes them with PG::BasicTypeMapForResults, as the README says.
require 'pg'
require 'json'

ROUTE = ARGV[0]
POOLED = ROUTE != 'direct'
BASE = ROUTE == 'pooled' ? 1700 : 1600
DRIVER = 'ruby-pg'

def connect(decoded: true)
  conn = PG.connect(host: ENV[POOLED ? 'DRIVERS_POOLED_HOST' : 'DRIVERS_HOST'],
                    port: ENV[POOLED ? 'DRIVERS_POOLED_PORT' : 'DRIVERS_PORT'],
                    dbname: ENV['DRIVERS_DATABASE'], user: 'postgres')
  conn.type_map_for_results = PG::BasicTypeMapForResults.new(conn) if decoded
  conn
end

def one(conn, sql, *params)
  result = conn.exec_params(sql, params)
  result.ntuples.positive? && result.nfields.positive? ? result.getvalue(0, 0) : nil
end

def sqlstate(error)
  error.result&.error_field(PG::PG_DIAG_SQLSTATE)
end

def sqlstate_of(conn, sql, *params)
  one(conn, sql, *params)
  nil
rescue PG::Error => e
  sqlstate(e)
end

def check(condition, message)
  raise message unless condition
end

PATTERNS = {
  'guarded_write' => lambda do |a, _b|
    changes = JSON.generate(v: "ruby-pg #{ROUTE}")
    one(a, 'BEGIN')
    token = one(a, 'SELECT acquire_fenced($1, $2)', 4201, BASE + 1)
    written = one(a, 'SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', BASE + 1, token, changes)
    one(a, 'COMMIT')
    check(token.is_a?(Integer) && token.positive?, "token #{token.inspect} is not a positive Integer")
    check(written == true, "fenced_update returned #{written.inspect}")
    stale = one(a, 'SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', BASE + 1, token - 1, changes)
    check(stale == false, "a lower token wrote: #{stale.inspect}")
    # Undecoded, the refusal is the string "f", which Ruby takes as true.
    raw = connect(decoded: false)
    undecoded = one(raw, 'SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', BASE + 1, token - 1, changes)
    raw.close
    check(undecoded == 'f', "undecoded, the refusal was #{undecoded.inspect}")
    state = sqlstate_of(a, 'SELECT fenced_update($1, $2, $3, $4)', 'driver_rows', BASE + 1,
                        token - 1, changes)
    check(state == 'SF001', "fenced_update_strict with a lower token: SQLSTATE #{state}")
  end,
  'skip_if_busy' => lambda do |a, b|
    one(a, 'BEGIN')
    one(a, 'SELECT acquire_fenced($1, $2)', 4201, BASE + 2)
    one(b, 'BEGIN')
    busy = one(b, 'SELECT try_acquire_fenced($1, $2)', 4201, BASE + 2)
    one(b, 'ROLLBACK')
    one(a, 'ROLLBACK')
    check(busy.nil?, "try_acquire_fenced on a held key returned #{busy.inspect}")
  end,
  'bounded_wait' => lambda do |a, b|
    one(a, 'BEGIN')
    one(a, 'SELECT acquire_fenced($1, $2)', 4201, BASE + 2)
    one(b, 'BEGIN')
    state = sqlstate_of(b, 'SELECT acquire_fenced($1, $2, $3)', 4201, BASE + 2, '100 milliseconds')
    one(b, 'ROLLBACK')
    one(a, 'ROLLBACK')
    check(state == '55P03', "SQLSTATE #{state}")
  end,
  'stale_write' => lambda do |a, _b|
    one(a, 'BEGIN')
    older = one(a, 'SELECT acquire_fenced($1, $2)', 4201, BASE + 3)
    newer = one(a, 'SELECT acquire_fenced($1, $2)', 4201, BASE + 4)
    one(a, 'COMMIT')
    resource = "drivers/ruby-pg/#{ROUTE}"
    one(a, 'SELECT fence_check($1, $2)', resource, newer)
    state = sqlstate_of(a, 'SELECT fence_check($1, $2)', resource, older)
    check(state == 'SF001', "SQLSTATE #{state}")
  end,
  'named_and_bigint' => lambda do |a, _b|
    big = 5_000_000_000 + BASE
    one(a, 'BEGIN')
    named = one(a, 'SELECT acquire_fenced_named($1, $2)', 'drivers', "order:#{BASE}")
    by_bigint = one(a, 'SELECT acquire_fenced_named($1, $2::bigint::text)', 'drivers', big)
    by_text = one(a, 'SELECT acquire_fenced_named($1, $2)', 'drivers', big.to_s)
    one(a, 'COMMIT')
    check(by_bigint == by_text, 'a bigint key and its text are different locks')
    check(named != by_bigint, 'two keys shared a grant')
  end,
  'autocommit' => lambda do |a, _b|
    state = sqlstate_of(a, 'SELECT acquire_fenced($1, $2)', 4201, BASE + 5)
    check(state == '25P01', "SQLSTATE #{state}")
  end,
  'lease' => lambda do |a, b|
    key = BASE + 7
    token = one(a, 'SELECT try_acquire_lease($1, $2, $3, $4)', 4203, key, 'a', '30 seconds')
    busy = one(b, 'SELECT try_acquire_lease($1, $2, $3, $4)', 4203, key, 'b', '30 seconds')
    expiry = one(a, 'SELECT renew_lease($1, $2, $3, $4)', 4203, key, token, '30 seconds')
    released = one(a, 'SELECT release_lease($1, $2, $3)', 4203, key, token)
    taken = one(b, 'SELECT try_acquire_lease($1, $2, $3, $4)', 4203, key, 'b', '30 seconds')
    one(b, 'SELECT release_lease($1, $2, $3)', 4203, key, taken)
    check(token.is_a?(Integer) && token.positive?, "token #{token.inspect}")
    check(busy.nil?, "another owner got #{busy.inspect}")
    check(expiry.is_a?(Time), "renew returned #{expiry.inspect}")
    check(released == true && taken > token, "released #{released.inspect}, next token #{taken.inspect}")
  end,
  'leader_owner' => lambda do |a, b|
    key = BASE + 9
    term = one(a, 'SELECT try_acquire_fenced_session($1, $2, $3)', 4203, key, 'client-a')
    other = one(b, 'SELECT try_acquire_fenced_session($1, $2, $3)', 4203, key, 'client-b')
    check(term.is_a?(Integer) && term.positive?, "term #{term.inspect}")
    check(other.nil?, "a second owner became leader with term #{other.inspect}")
    unless POOLED
      released = one(a, 'SELECT release_fenced($1, $2, $3)', 4203, key, 'client-a')
      check(released == true, "released #{released.inspect}")
    end
  end,
  'permits' => lambda do |a, b|
    # One permit: a slot and a token as a row; the other client's try gets no row (count 0),
    # never a NULL row; after the holder's commit, a larger token.
    key = BASE + 13
    one(a, 'BEGIN')
    slot = one(a, 'SELECT slot FROM acquire_permit($1, $2, $3)', 4206, key, 1)
    token = one(a, 'SELECT token FROM acquire_permit($1, $2, $3)', 4206, key, 1)
    one(b, 'BEGIN')
    none = one(b, 'SELECT count(*) FROM try_acquire_permit($1, $2, $3)', 4206, key, 1)
    one(b, 'ROLLBACK')
    one(a, 'COMMIT')
    one(b, 'BEGIN')
    later = one(b, 'SELECT token FROM try_acquire_permit($1, $2, $3)', 4206, key, 1)
    one(b, 'COMMIT')
    check(slot == 1 && token.is_a?(Integer) && token.positive?, "slot #{slot.inspect}, token #{token.inspect}")
    check(none == 0, "a second holder of one permit: #{none.inspect} rows")
    check(later.is_a?(Integer) && later > token, "next token #{later.inspect}")
  end,
  'lease_permit' => lambda do |a, b|
    # A permit as a lease: every call commits on its own, so it works through the pooler.
    key = BASE + 14
    acquire = 'SELECT token FROM try_acquire_lease_permit($1, $2, $3, $4, $5)'
    token = one(a, acquire, 4206, key, 1, 'a', '30 seconds')
    none = one(b, 'SELECT count(*) FROM try_acquire_lease_permit($1, $2, $3, $4, $5)', 4206, key, 1, 'b',
               '30 seconds')
    expiry = one(a, 'SELECT renew_lease($1, $2, $3, $4)', 4206, key, token, '30 seconds')
    released = one(a, 'SELECT release_lease($1, $2, $3)', 4206, key, token)
    taken = one(b, 'SELECT token FROM acquire_lease_permit($1, $2, $3, $4, $5, $6)', 4206, key, 1, 'b',
                '30 seconds', '5 seconds')
    one(b, 'SELECT release_lease($1, $2, $3)', 4206, key, taken)
    check(token.is_a?(Integer) && token.positive?, "token #{token.inspect}")
    check(none == 0, "another owner got a permit: #{none.inspect} rows")
    check(expiry.is_a?(Time), "renew returned #{expiry.inspect}")
    check(released == true && taken.is_a?(Integer) && taken > token,
          "released #{released.inspect}, next token #{taken.inspect}")
  end,
  'shared_lock' => lambda do |a, b|
    # Two readers at once, each with its own token; a writer's try is busy (NULL).
    key = BASE + 15
    one(a, 'BEGIN')
    one(b, 'BEGIN')
    first = one(a, 'SELECT acquire_fenced($1, $2, shared => true)', 4206, key)
    second = one(b, 'SELECT try_acquire_fenced($1, $2, shared => true)', 4206, key)
    one(b, 'ROLLBACK')
    one(b, 'BEGIN')
    busy = one(b, 'SELECT try_acquire_fenced($1, $2)', 4206, key)
    one(b, 'ROLLBACK')
    one(a, 'COMMIT')
    check(first.is_a?(Integer) && second.is_a?(Integer) && second > first,
          "readers' tokens #{first.inspect}, #{second.inspect}")
    check(busy.nil?, "a writer got #{busy.inspect} beside a reader")
  end,
  'session_lease' => lambda do |a, _b|
    token = one(a, 'SELECT acquire_fenced_session($1, $2)', 4201, BASE + 6)
    held = one(a, 'SELECT current_fence($1, $2)', 4201, BASE + 6)
    released = one(a, 'SELECT release_fenced($1, $2)', 4201, BASE + 6)
    check(held == token && released == true, "held #{held.inspect}, released #{released.inspect}")
  end
}.freeze

HELD = 'SELECT token FROM fenced_locks WHERE ns = $1 AND id = $2 AND pid = pg_backend_pid()'

# One transaction of the mixed workload; returns what was wrong with its answers, or nil.
def mixed_transaction(conn, kind, key, row)
  one(conn, 'BEGIN')
  problem =
    case kind
    when 'acquire', 'try'
      function = kind == 'acquire' ? 'acquire_fenced' : 'try_acquire_fenced'
      token = one(conn, "SELECT #{function}($1, $2)", 4205, key)
      held = one(conn, HELD, 4205, key)
      "#{function} gave #{token.inspect}, fenced_locks shows #{held.inspect}" unless
        token.is_a?(Integer) && token.positive? && held == token
    when 'current'
      fence = one(conn, 'SELECT current_fence($1, $2)', 4205, key)
      "current_fence of a free key gave #{fence.inspect}" unless fence.nil?
    when 'leader'
      term = one(conn, 'SELECT try_acquire_fenced_session($1, $2, $3)', 4205, key, "owner-#{key}")
      released = one(conn, 'SELECT release_fenced($1, $2, $3)', 4205, key, "owner-#{key}")
      "try_acquire_fenced_session gave #{term.inspect}, release_fenced #{released.inspect}" unless
        term.is_a?(Integer) && term.positive? && released == true
    else
      token = one(conn, 'SELECT acquire_fenced($1, $2)', 4205, key)
      written = one(conn, 'SELECT fenced_update_or_false($1, $2, $3, $4)', 'driver_rows', row, token,
                    JSON.generate(v: key.to_s))
      "fenced_update with token #{token.inspect} gave #{written.inspect}" unless written == true
    end
  one(conn, 'COMMIT')
  problem
end

def run_mixed(settings, process)
  slot = Integer(ENV.fetch('MIXED_SLOT'))
  conns = Array.new(6) { connect }
  picks = Random.new(process)
  wrong = errors = 0
  first = nil
  150.times do |i|
    conn = conns[picks.rand(conns.size)]
    kind = %w[acquire try current leader update][picks.rand(5)]
    key = slot * 10_000 + process * 1000 + i
    begin
      problem = mixed_transaction(conn, kind, key, slot * 20 + process * 10 + i % 10 + 3001)
      wrong += 1 if problem
    rescue PG::Error => e
      errors += 1
      problem = "SQLSTATE #{sqlstate(e)}: #{e.message.lines.first.strip}"
      begin
        one(conn, 'ROLLBACK')
      rescue PG::Error
        nil
      end
    end
    first ||= "#{kind}: #{problem}" if problem
  end
  conns.each(&:close)
  puts "#{DRIVER} mixed #{settings} p#{process}: 150 transactions, #{wrong} wrong, #{errors} errors" +
       (first ? "; first: #{first}" : '')
  wrong.zero? && errors.zero?
end

def run_patterns
  a = connect
  b = connect
  failed = 0
  PATTERNS.each do |name, pattern|
    # Session-scoped locks belong to one server connection: not through a transaction pooler.
    next if POOLED && name == 'session_lease'

    begin
      pattern.call(a, b)
      puts "#{DRIVER} #{ROUTE} #{name}: ok"
    rescue StandardError => e
      failed += 1
      puts "#{DRIVER} #{ROUTE} #{name}: FAILED: #{e.message.lines.first&.strip}"
      [a, b].each { |conn| conn.exec('ROLLBACK') rescue nil } # rubocop:disable Style/RescueModifier
    end
  end
  a.close
  b.close
  failed.zero?
end

exit(ROUTE == 'mixed' ? run_mixed(ARGV[1], Integer(ARGV[2])) : run_patterns)
