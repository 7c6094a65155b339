// Package bootstrap turns a configuration file into a running relay.
//
// Load reads the YAML file, substitutes ${NAME} and ${NAME:-default} from
// the environment, decodes it over the defaults and validates it, reporting
// every problem with its key path, line and what to do (Error). Validation
// also compiles what the engine needs (Compiled: the router with its topic
// patterns and jq transforms, the address templates, the signing secrets),
// so nothing is compiled twice. Every secret the configuration holds is
// registered in Secrets, which redacts them from logs, last_error and the
// configuration that `config check` prints (Loaded.Effective).
//
// OpenDialect opens the configured database; EngineOptions and
// SinkFactories wire the dialect, the destinations' sinks and the router
// into the engine of package actors. Run waits for the database, applies
// or checks the migrations, runs the engine until SIGTERM or SIGINT and
// drains it. Dev is `queuebox dev`: a throwaway PostgreSQL, a receiver that
// prints deliveries, a generated configuration and sample rows.
package bootstrap
