package security

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"
)

// User is one entry of the users file.
type User struct {
	// PasswordHash is a bcrypt hash ("$2a$10$..."); empty means the user
	// cannot log in with a password (a client-certificate user that is
	// listed only for its roles).
	PasswordHash string `yaml:"password-hash,omitempty"`
	// Roles name the groups the user belongs to, as security settings
	// refer to them.
	Roles []string `yaml:"roles,omitempty,flow"`
}

// Users is the content of a users file. The zero value is an empty
// table; methods that change it are not safe for concurrent use (a
// Store holds its own copy).
type Users struct {
	// Users maps user names to their entries.
	Users map[string]User `yaml:"users"`
}

// ErrInvalidUser is returned for a user name or role that cannot be
// stored: empty, or containing control characters or spaces.
var ErrInvalidUser = errors.New("security: invalid user or role name")

// ErrNoSuchUser is returned by Users.SetPassword, Users.SetRoles and
// Users.Remove for a user the table does not list.
var ErrNoSuchUser = errors.New("security: no such user")

// validName checks a user or role name: non-empty, printable, no blanks.
func validName(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", ErrInvalidUser)
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%w: %q contains a blank or control character", ErrInvalidUser, s)
		}
	}
	return nil
}

// ParseUsers decodes a users file, refusing unknown fields, invalid
// names and password hashes that are not bcrypt.
func ParseUsers(data []byte) (*Users, error) {
	u := &Users{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(u); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if u.Users == nil {
		u.Users = map[string]User{}
	}
	for name, e := range u.Users {
		if err := validName(name); err != nil {
			return nil, err
		}
		for _, r := range e.Roles {
			if err := validName(r); err != nil {
				return nil, fmt.Errorf("user %q: %w", name, err)
			}
		}
		if e.PasswordHash != "" {
			if _, err := bcrypt.Cost([]byte(e.PasswordHash)); err != nil {
				return nil, fmt.Errorf("user %q: password-hash is not a bcrypt hash: %w", name, err)
			}
		}
	}
	return u, nil
}

// LoadUsers reads and parses a users file.
func LoadUsers(path string) (*Users, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	u, err := ParseUsers(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return u, nil
}

// fileHeader starts every file Save writes.
const fileHeader = "# Junction users: managed with `junction user add|passwd|roles|rm|ls --file FILE`.\n" +
	"# Passwords are bcrypt hashes; the broker rereads this file when it changes.\n"

// Save writes the table to path atomically: a temporary file in the same
// directory, written with mode 0600, synced, then renamed over path, so
// a broker reloading the file sees the old or the new table, never half
// of one.
func (u *Users) Save(path string) error {
	var body bytes.Buffer
	enc := yaml.NewEncoder(&body)
	enc.SetIndent(2)
	if err := enc.Encode(u); err != nil {
		return err
	}
	enc.Close()
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if _, err := f.WriteString(fileHeader); err != nil {
		return err
	}
	if _, err := f.Write(body.Bytes()); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// hashCost is bcrypt.DefaultCost; tests lower it (bcrypt is slow under
// the race detector).
var hashCost = bcrypt.DefaultCost

// HashPassword returns the bcrypt hash of password at bcrypt.DefaultCost.
func HashPassword(password string) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(password), hashCost)
	if err != nil {
		return "", err
	}
	return string(h), nil
}

// Add adds a user with a password (hashed here) and roles. Adding a user
// that exists is an error; use SetPassword and SetRoles to change one.
func (u *Users) Add(name, password string, roles []string) error {
	if err := validName(name); err != nil {
		return err
	}
	if _, ok := u.Users[name]; ok {
		return fmt.Errorf("security: user %q already exists", name)
	}
	if err := checkRoles(roles); err != nil {
		return err
	}
	e := User{Roles: slices.Clone(roles)}
	if password != "" {
		h, err := HashPassword(password)
		if err != nil {
			return err
		}
		e.PasswordHash = h
	}
	if u.Users == nil {
		u.Users = map[string]User{}
	}
	u.Users[name] = e
	return nil
}

func checkRoles(roles []string) error {
	for _, r := range roles {
		if err := validName(r); err != nil {
			return err
		}
	}
	return nil
}

// SetPassword replaces a user's password.
func (u *Users) SetPassword(name, password string) error {
	e, ok := u.Users[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoSuchUser, name)
	}
	h, err := HashPassword(password)
	if err != nil {
		return err
	}
	e.PasswordHash = h
	u.Users[name] = e
	return nil
}

// SetRoles replaces a user's roles.
func (u *Users) SetRoles(name string, roles []string) error {
	e, ok := u.Users[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoSuchUser, name)
	}
	if err := checkRoles(roles); err != nil {
		return err
	}
	e.Roles = slices.Clone(roles)
	u.Users[name] = e
	return nil
}

// Remove deletes a user.
func (u *Users) Remove(name string) error {
	if _, ok := u.Users[name]; !ok {
		return fmt.Errorf("%w: %q", ErrNoSuchUser, name)
	}
	delete(u.Users, name)
	return nil
}

// Names returns the user names in sorted order.
func (u *Users) Names() []string {
	names := make([]string, 0, len(u.Users))
	for n := range u.Users {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// String lists the users and their roles, never their hashes.
func (u *Users) String() string {
	var b strings.Builder
	for _, n := range u.Names() {
		fmt.Fprintf(&b, "%s %v\n", n, u.Users[n].Roles)
	}
	return b.String()
}
