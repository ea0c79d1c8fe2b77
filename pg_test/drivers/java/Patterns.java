// The driver suite's patterns, run by PostgreSQL's JDBC driver (pgjdbc) with its default
// parameter types (Java ints as int4, strings as varchar, so json and intervals are cast in
// the SQL), directly and through PgBouncer in transaction mode; and the mixed workload through
// PgBouncer (run.sh says what it checks).
//     java Patterns ROUTE              (ROUTE: direct | pooled)
//     java Patterns mixed SETTINGS N   (SETTINGS: documented | defaults; N: the process)
// Behind the pooler the README's setting is prepareThreshold=0: pgjdbc's default prepares a
// statement on the server after 5 uses, under a name (S_1, S_2, ...) another client reaches.
// pgjdbc speaks TCP only; the suite's servers listen on Unix sockets, so it connects through
// UnixSocketFactory below (the bytes on the wire are the same).
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.SocketAddress;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Timestamp;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;

public final class Patterns {
    static String route;
    static boolean pooled;
    static boolean documented;
    static int base;

    /** Sockets to the Unix socket named by socketFactoryArg, for pgjdbc's socketFactory. */
    public static final class UnixSocketFactory extends javax.net.SocketFactory {
        private final String path;

        public UnixSocketFactory(String path) {
            this.path = path;
        }

        @Override
        public Socket createSocket() {
            return new UnixSocket(path);
        }

        @Override
        public Socket createSocket(String host, int port) throws IOException {
            Socket socket = createSocket();
            socket.connect(null);
            return socket;
        }

        @Override
        public Socket createSocket(String host, int port, java.net.InetAddress local, int localPort)
                throws IOException {
            return createSocket(host, port);
        }

        @Override
        public Socket createSocket(java.net.InetAddress host, int port) throws IOException {
            return createSocket((String) null, port);
        }

        @Override
        public Socket createSocket(java.net.InetAddress host, int port, java.net.InetAddress local,
                int localPort) throws IOException {
            return createSocket((String) null, port);
        }
    }

    /** The few Socket methods pgjdbc uses, over a Unix domain SocketChannel. */
    static final class UnixSocket extends Socket {
        private final String path;
        private SocketChannel channel;
        private int timeout;

        UnixSocket(String path) {
            this.path = path;
        }

        @Override
        public void connect(SocketAddress ignored, int connectTimeout) throws IOException {
            channel = SocketChannel.open(UnixDomainSocketAddress.of(path));
        }

        @Override
        public void connect(SocketAddress ignored) throws IOException {
            connect(ignored, 0);
        }

        @Override
        public InputStream getInputStream() {
            return Channels.newInputStream(channel);
        }

        @Override
        public OutputStream getOutputStream() {
            return Channels.newOutputStream(channel);
        }

        @Override
        public boolean isConnected() {
            return channel != null && channel.isConnected();
        }

        @Override
        public boolean isClosed() {
            return channel != null && !channel.isOpen();
        }

        @Override
        public void close() throws IOException {
            if (channel != null) channel.close();
        }

        @Override
        public void setTcpNoDelay(boolean on) {}

        @Override
        public void setKeepAlive(boolean on) {}

        @Override
        public void setSoTimeout(int milliseconds) {
            timeout = milliseconds;
        }

        @Override
        public int getSoTimeout() {
            return timeout;
        }

        @Override
        public void setReceiveBufferSize(int size) {}

        @Override
        public void setSendBufferSize(int size) {}
    }

    static Connection connect() throws SQLException {
        String host = System.getenv(pooled ? "DRIVERS_POOLED_HOST" : "DRIVERS_HOST");
        String port = System.getenv(pooled ? "DRIVERS_POOLED_PORT" : "DRIVERS_PORT");
        Properties properties = new Properties();
        properties.setProperty("user", "postgres");
        properties.setProperty("sslmode", "disable");
        properties.setProperty("gssEncMode", "disable");
        properties.setProperty("socketFactory", UnixSocketFactory.class.getName());
        properties.setProperty("socketFactoryArg", host + "/.s.PGSQL." + port);
        if (documented) properties.setProperty("prepareThreshold", "0");
        return DriverManager.getConnection(
                "jdbc:postgresql://localhost:" + port + "/" + System.getenv("DRIVERS_DATABASE"), properties);
    }

    /** The first column of the first row (Long, Boolean, Timestamp, null, ...). BEGIN, COMMIT
     *  and ROLLBACK are JDBC's setAutoCommit(false), commit() and rollback(). */
    static Object one(Connection conn, String sql, Object... params) throws SQLException {
        switch (sql) {
            case "BEGIN":
                conn.setAutoCommit(false);
                return null;
            case "COMMIT":
                conn.commit();
                conn.setAutoCommit(true);
                return null;
            case "ROLLBACK":
                if (!conn.getAutoCommit()) conn.rollback();
                conn.setAutoCommit(true);
                return null;
            default:
                break;
        }
        try (PreparedStatement statement = conn.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) statement.setObject(i + 1, params[i]);
            if (!statement.execute()) return null;
            try (ResultSet result = statement.getResultSet()) {
                return result.next() ? result.getObject(1) : null;
            }
        }
    }

    static String sqlstateOf(Connection conn, String sql, Object... params) {
        try {
            one(conn, sql, params);
            return null;
        } catch (SQLException e) {
            return e.getSQLState();
        }
    }

    static void check(boolean condition, String message) {
        if (!condition) throw new AssertionError(message);
    }

    static boolean positive(Object value) {
        return value instanceof Long && (Long) value > 0;
    }

    interface Pattern {
        void run(Connection a, Connection b) throws SQLException;
    }

    static Map<String, Pattern> patterns() {
        Map<String, Pattern> patterns = new LinkedHashMap<>();
        patterns.put("guarded_write", (a, b) -> {
            String changes = "{\"v\": \"jdbc " + route + "\"}";
            String update = "SELECT fenced_update_or_false(?, ?, ?, ?::jsonb)";
            one(a, "BEGIN");
            Object token = one(a, "SELECT acquire_fenced(?, ?)", 4201, base + 1);
            Object written = one(a, update, "driver_rows", base + 1, token, changes);
            one(a, "COMMIT");
            check(positive(token), "token " + token + " is not a positive Long");
            check(Boolean.TRUE.equals(written), "fenced_update returned " + written);
            Object stale = one(a, update, "driver_rows", base + 1, (Long) token - 1, changes);
            check(Boolean.FALSE.equals(stale), "a lower token wrote: " + stale);
            String state = sqlstateOf(a, "SELECT fenced_update(?, ?, ?, ?::jsonb)", "driver_rows",
                    base + 1, (Long) token - 1, changes);
            check("SF001".equals(state), "fenced_update_strict with a lower token: SQLSTATE " + state);
        });
        patterns.put("skip_if_busy", (a, b) -> {
            one(a, "BEGIN");
            one(a, "SELECT acquire_fenced(?, ?)", 4201, base + 2);
            one(b, "BEGIN");
            Object busy = one(b, "SELECT try_acquire_fenced(?, ?)", 4201, base + 2);
            one(b, "ROLLBACK");
            one(a, "ROLLBACK");
            check(busy == null, "try_acquire_fenced on a held key returned " + busy);
        });
        patterns.put("bounded_wait", (a, b) -> {
            one(a, "BEGIN");
            one(a, "SELECT acquire_fenced(?, ?)", 4201, base + 2);
            one(b, "BEGIN");
            String state = sqlstateOf(b, "SELECT acquire_fenced(?, ?, ?::interval)", 4201, base + 2,
                    "100 milliseconds");
            one(b, "ROLLBACK");
            one(a, "ROLLBACK");
            check("55P03".equals(state), "SQLSTATE " + state);
        });
        patterns.put("stale_write", (a, b) -> {
            one(a, "BEGIN");
            Object older = one(a, "SELECT acquire_fenced(?, ?)", 4201, base + 3);
            Object newer = one(a, "SELECT acquire_fenced(?, ?)", 4201, base + 4);
            one(a, "COMMIT");
            String resource = "drivers/jdbc/" + route;
            one(a, "SELECT fence_check(?, ?)", resource, newer);
            String state = sqlstateOf(a, "SELECT fence_check(?, ?)", resource, older);
            check("SF001".equals(state), "SQLSTATE " + state);
        });
        patterns.put("named_and_bigint", (a, b) -> {
            long big = 5_000_000_000L + base;
            one(a, "BEGIN");
            Object named = one(a, "SELECT acquire_fenced_named(?, ?)", "drivers", "order:" + base);
            Object byBigint = one(a, "SELECT acquire_fenced_named(?, CAST(? AS bigint)::text)", "drivers", big);
            Object byText = one(a, "SELECT acquire_fenced_named(?, ?)", "drivers", Long.toString(big));
            one(a, "COMMIT");
            check(byBigint.equals(byText), "a bigint key and its text are different locks");
            check(!named.equals(byBigint), "two keys shared a grant");
        });
        patterns.put("autocommit", (a, b) -> {
            String state = sqlstateOf(a, "SELECT acquire_fenced(?, ?)", 4201, base + 5);
            check("25P01".equals(state), "SQLSTATE " + state);
        });
        patterns.put("lease", (a, b) -> {
            int key = base + 7;
            String ttl = "30 seconds";
            Object token = one(a, "SELECT try_acquire_lease(?, ?, ?, ?::interval)", 4203, key, "a", ttl);
            Object busy = one(b, "SELECT try_acquire_lease(?, ?, ?, ?::interval)", 4203, key, "b", ttl);
            Object expiry = one(a, "SELECT renew_lease(?, ?, ?, ?::interval)", 4203, key, token, ttl);
            Object released = one(a, "SELECT release_lease(?, ?, ?)", 4203, key, token);
            Object taken = one(b, "SELECT try_acquire_lease(?, ?, ?, ?::interval)", 4203, key, "b", ttl);
            one(b, "SELECT release_lease(?, ?, ?)", 4203, key, taken);
            check(positive(token), "token " + token);
            check(busy == null, "another owner got " + busy);
            check(expiry instanceof Timestamp, "renew returned " + expiry);
            check(Boolean.TRUE.equals(released) && (Long) taken > (Long) token,
                    "released " + released + ", next token " + taken);
        });
        patterns.put("leader_owner", (a, b) -> {
            int key = base + 9;
            Object term = one(a, "SELECT try_acquire_fenced_session(?, ?, ?)", 4203, key, "client-a");
            Object other = one(b, "SELECT try_acquire_fenced_session(?, ?, ?)", 4203, key, "client-b");
            check(positive(term), "term " + term);
            check(other == null, "a second owner became leader with term " + other);
            if (!pooled) {
                Object released = one(a, "SELECT release_fenced(?, ?, ?)", 4203, key, "client-a");
                check(Boolean.TRUE.equals(released), "released " + released);
            }
        });
        patterns.put("permits", (a, b) -> {
            // One permit: a slot and a token as a row; the other client's try gets no row
            // (count 0), never a NULL row; after the holder's commit, a larger token.
            int key = base + 13;
            one(a, "BEGIN");
            Object slot = one(a, "SELECT slot FROM acquire_permit(?, ?, ?)", 4206, key, 1);
            Object token = one(a, "SELECT token FROM acquire_permit(?, ?, ?)", 4206, key, 1);
            one(b, "BEGIN");
            Object none = one(b, "SELECT count(*) FROM try_acquire_permit(?, ?, ?)", 4206, key, 1);
            one(b, "ROLLBACK");
            one(a, "COMMIT");
            one(b, "BEGIN");
            Object later = one(b, "SELECT token FROM try_acquire_permit(?, ?, ?)", 4206, key, 1);
            one(b, "COMMIT");
            check(Integer.valueOf(1).equals(slot) && positive(token), "slot " + slot + ", token " + token);
            check(Long.valueOf(0).equals(none), "a second holder of one permit: " + none + " rows");
            check(positive(later) && (Long) later > (Long) token, "next token " + later);
        });
        patterns.put("lease_permit", (a, b) -> {
            // A permit as a lease: every call commits on its own, so it works through the pooler.
            int key = base + 14;
            String ttl = "30 seconds";
            Object token = one(a, "SELECT token FROM try_acquire_lease_permit(?, ?, ?, ?, ?::interval)", 4206, key, 1,
                    "a", ttl);
            Object none = one(b, "SELECT count(*) FROM try_acquire_lease_permit(?, ?, ?, ?, ?::interval)", 4206, key,
                    1, "b", ttl);
            Object expiry = one(a, "SELECT renew_lease(?, ?, ?, ?::interval)", 4206, key, token, ttl);
            Object released = one(a, "SELECT release_lease(?, ?, ?)", 4206, key, token);
            Object taken = one(b, "SELECT token FROM acquire_lease_permit(?, ?, ?, ?, ?::interval, ?::interval)",
                    4206, key, 1, "b", ttl, "5 seconds");
            one(b, "SELECT release_lease(?, ?, ?)", 4206, key, taken);
            check(positive(token), "token " + token);
            check(Long.valueOf(0).equals(none), "another owner got a permit: " + none + " rows");
            check(expiry instanceof Timestamp, "renew returned " + expiry);
            check(Boolean.TRUE.equals(released) && positive(taken) && (Long) taken > (Long) token,
                    "released " + released + ", next token " + taken);
        });
        patterns.put("shared_lock", (a, b) -> {
            // Two readers at once, each with its own token; a writer's try is busy (NULL).
            int key = base + 15;
            one(a, "BEGIN");
            one(b, "BEGIN");
            Object first = one(a, "SELECT acquire_fenced(?, ?, shared => true)", 4206, key);
            Object second = one(b, "SELECT try_acquire_fenced(?, ?, shared => true)", 4206, key);
            one(b, "ROLLBACK");
            one(b, "BEGIN");
            Object busy = one(b, "SELECT try_acquire_fenced(?, ?)", 4206, key);
            one(b, "ROLLBACK");
            one(a, "COMMIT");
            check(positive(first) && positive(second) && (Long) second > (Long) first,
                    "readers' tokens " + first + ", " + second);
            check(busy == null, "a writer got " + busy + " beside a reader");
        });
        patterns.put("session_lease", (a, b) -> {
            Object token = one(a, "SELECT acquire_fenced_session(?, ?)", 4201, base + 6);
            Object held = one(a, "SELECT current_fence(?, ?)", 4201, base + 6);
            Object released = one(a, "SELECT release_fenced(?, ?)", 4201, base + 6);
            check(token.equals(held) && Boolean.TRUE.equals(released), "held " + held + ", released " + released);
        });
        return patterns;
    }

    static final String HELD = "SELECT token FROM fenced_locks WHERE ns = ? AND id = ? AND pid = pg_backend_pid()";

    /** One transaction of the mixed workload: what was wrong with its answers, or null. */
    static String mixedTransaction(Connection conn, String kind, int key, int row) throws SQLException {
        String problem = null;
        one(conn, "BEGIN");
        switch (kind) {
            case "acquire":
            case "try": {
                String function = kind.equals("acquire") ? "acquire_fenced" : "try_acquire_fenced";
                Object token = one(conn, "SELECT " + function + "(?, ?)", 4205, key);
                Object lock = one(conn, HELD, 4205, key);
                if (!positive(token) || !token.equals(lock))
                    problem = function + " gave " + token + ", fenced_locks shows " + lock;
                break;
            }
            case "current": {
                Object fence = one(conn, "SELECT current_fence(?, ?)", 4205, key);
                if (fence != null) problem = "current_fence of a free key gave " + fence;
                break;
            }
            case "leader": {
                Object term = one(conn, "SELECT try_acquire_fenced_session(?, ?, ?)", 4205, key, "owner-" + key);
                Object released = one(conn, "SELECT release_fenced(?, ?, ?)", 4205, key, "owner-" + key);
                if (!positive(term) || !Boolean.TRUE.equals(released))
                    problem = "try_acquire_fenced_session gave " + term + ", release_fenced " + released;
                break;
            }
            default: {
                Object token = one(conn, "SELECT acquire_fenced(?, ?)", 4205, key);
                Object written = one(conn, "SELECT fenced_update_or_false(?, ?, ?, ?::jsonb)", "driver_rows", row,
                        token, "{\"v\": \"" + key + "\"}");
                if (!Boolean.TRUE.equals(written))
                    problem = "fenced_update with token " + token + " gave " + written;
            }
        }
        one(conn, "COMMIT");
        return problem;
    }

    static boolean runMixed(String settings, int process) throws SQLException {
        int slot = Integer.parseInt(System.getenv("MIXED_SLOT"));
        List<Connection> conns = new ArrayList<>();
        for (int i = 0; i < 6; i++) conns.add(connect());
        Random picks = new Random(process);
        String[] kinds = {"acquire", "try", "current", "leader", "update"};
        int wrong = 0;
        int errors = 0;
        String first = null;
        for (int i = 0; i < 150; i++) {
            Connection conn = conns.get(picks.nextInt(conns.size()));
            String kind = kinds[picks.nextInt(kinds.length)];
            int key = slot * 10000 + process * 1000 + i;
            String problem;
            try {
                problem = mixedTransaction(conn, kind, key, slot * 20 + process * 10 + i % 10 + 3001);
                if (problem != null) wrong++;
            } catch (SQLException e) {
                errors++;
                problem = "SQLSTATE " + e.getSQLState() + ": " + e.getMessage().split("\n")[0];
                try {
                    one(conn, "ROLLBACK");
                } catch (SQLException ignored) {
                    // nothing to roll back
                }
            }
            if (problem != null && first == null) first = kind + ": " + problem;
        }
        for (Connection conn : conns) conn.close();
        System.out.println("jdbc mixed " + settings + " p" + process + ": 150 transactions, " + wrong
                + " wrong, " + errors + " errors" + (first != null ? "; first: " + first : ""));
        return wrong == 0 && errors == 0;
    }

    static boolean runPatterns() throws SQLException {
        Connection a = connect();
        Connection b = connect();
        int failed = 0;
        for (Map.Entry<String, Pattern> pattern : patterns().entrySet()) {
            // Session-scoped locks belong to one server connection: not through a transaction pooler.
            if (pooled && pattern.getKey().equals("session_lease")) continue;
            try {
                pattern.getValue().run(a, b);
                System.out.println("jdbc " + route + " " + pattern.getKey() + ": ok");
            } catch (SQLException | AssertionError | RuntimeException e) {
                failed++;
                System.out.println("jdbc " + route + " " + pattern.getKey() + ": FAILED: " + e.getMessage());
                for (Connection conn : List.of(a, b)) {
                    try {
                        one(conn, "ROLLBACK");
                    } catch (SQLException ignored) {
                        // nothing to roll back
                    }
                }
            }
        }
        a.close();
        b.close();
        return failed == 0;
    }

    public static void main(String[] args) throws SQLException {
        route = args[0];
        pooled = !route.equals("direct");
        documented = route.equals("pooled") || (route.equals("mixed") && args[1].equals("documented"));
        base = route.equals("pooled") ? 1300 : 1200;
        boolean ok = route.equals("mixed") ? runMixed(args[1], Integer.parseInt(args[2])) : runPatterns();
        System.exit(ok ? 0 : 1);
    }
}
