module github.com/fenced-lock/fenced_lock/clients/go

go 1.17

require (
	github.com/jackc/pgconn v1.11.0
	github.com/jackc/pgx/v4 v4.15.0
)
