// Package security holds Junction's users, roles and permissions: the
// users file, an Authenticator over it (bcrypt password hashes) and an
// Authorizer over security settings (which roles may do what on which
// addresses, chosen by wildcard pattern as in ActiveMQ Artemis).
//
// # Users file
//
// A YAML file maps each user name to a bcrypt hash of its password and
// a list of roles:
//
//	users:
//	  alice:
//	    password-hash: $2a$10$...
//	    roles: [admin]
//	  sensor-17:
//	    password-hash: $2a$10$...
//	    roles: [devices]
//
// [LoadUsers] reads one, [Users.Save] writes one atomically (temporary
// file, fsync, rename; mode 0600), and [Reloader] watches one so that
// changes apply without a restart: a file that fails to parse keeps the
// table in force.
//
// # Authentication
//
// [Store.Authenticate] checks a login and password against the table.
// bcrypt at its default cost takes 50 to 100 ms of CPU per check, which
// is the point of it, but a reconnect storm of a thousand devices would
// then burn a core for a minute. So successful checks are remembered in
// memory, keyed by a salted SHA-256 of (user, password, stored hash): the
// same credentials against the same hash skip bcrypt until the process
// restarts or the cache fills (it is then emptied). A changed password
// changes the hash and so misses the cache. Failed checks are never
// cached. Anonymous clients (an empty login) are accepted only when
// [Options.AllowAnonymous] says so.
//
// # Authorization
//
// Every authenticated user implicitly holds the role
// [RoleAuthenticated]; anonymous clients hold [Options.AnonymousRoles]
// (by default [RoleAnonymous]) and nothing else. A user listed in the
// users file also holds the roles listed there, whether it logged in
// with a password or (AMQP SASL EXTERNAL) with a client certificate
// whose subject is its name.
//
// [Store.Authorize] finds the most specific [Setting] whose pattern
// matches the address (core/wildcard's rules: a literal word outranks
// '*', which outranks '#') and grants a permission when one of the
// user's roles is listed for it there. Settings do not merge: the most
// specific match decides alone, as in Artemis. [DefaultSettings] apply
// unless the configuration gives a setting with the same pattern: on
// "#" every authenticated user may send, consume, browse, create
// addresses and create and delete queues, and only [RoleAdmin] may
// also delete addresses and manage the broker. Answers are cached per
// user and address, and the cache is dropped whenever the users table
// changes.
package security
