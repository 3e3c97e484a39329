// Package passwords decides whether a password a user supplies is strong enough to protect a
// database account. The rule is meant to be explained in one error message: length, variety,
// and not one of the passwords attackers try first.
package passwords

import (
	"fmt"
	"strings"
	"unicode"
)

// Policy of user-supplied passwords.
const (
	// MinLength is the shortest password accepted.
	MinLength = 12
	// PassphraseLength is the length from which a password needs no variety of characters
	// (a passphrase, or a generated password over a small alphabet).
	PassphraseLength = 20
	// MinClasses is how many of the four classes (lower case, upper case, digits, other) a
	// password shorter than PassphraseLength must use.
	MinClasses = 3
	// MaxLength is what MariaDB and MySQL hash without trouble.
	MaxLength = 256
)

// Requirement says, in one sentence, what Check asks for.
var Requirement = fmt.Sprintf("use at least %d characters with at least %d of lower-case letters, upper-case letters, digits and symbols "+
	"(or %d characters or more of any kind), not a common password, not the user name", MinLength, MinClasses, PassphraseLength)

// commonWords are the cores of the passwords tried first (lists of leaked passwords, and the
// names of this software). A password that is one of them with digits or symbols around it is
// refused.
var commonWords = map[string]bool{
	"password": true, "passw": true, "pass": true, "qwerty": true, "qwertz": true, "azerty": true,
	"letmein": true, "welcome": true, "admin": true, "administrator": true, "root": true,
	"secret": true, "changeme": true, "default": true, "iloveyou": true, "monkey": true,
	"dragon": true, "master": true, "login": true, "abc": true, "test": true, "guest": true,
	"sunshine": true, "football": true, "baseball": true, "princess": true, "starwars": true,
	"trustno": true, "superman": true, "shadow": true, "mysql": true, "mariadb": true,
	"database": true, "dolphin": true, "kubernetes": true, "summer": true, "winter": true,
	"spring": true, "autumn": true, "hello": true, "freedom": true, "whatever": true,
}

// unleet undoes the usual letter-for-symbol swaps (p@ssw0rd) before the common-word check.
var unleet = strings.NewReplacer("@", "a", "4", "a", "0", "o", "1", "i", "!", "i", "3", "e", "$", "s", "5", "s", "7", "t")

// Check returns nil for a strong password, or an error saying what is wrong and what is
// required. user, when not empty, must not be part of the password.
func Check(password, user string) error {
	n := len([]rune(password))
	var problems []string
	switch {
	case n == 0:
		return fmt.Errorf("the password is empty: %s", Requirement)
	case n > MaxLength:
		return fmt.Errorf("the password has %d characters, at most %d are accepted", n, MaxLength)
	case n < MinLength:
		problems = append(problems, fmt.Sprintf("it has %d characters", n))
	}
	if c := classes(password); n < PassphraseLength && c < MinClasses {
		problems = append(problems, fmt.Sprintf("it uses %d kind(s) of characters", c))
	}
	lower := strings.ToLower(password)
	if core := unleet.Replace(strings.TrimFunc(lower, func(r rune) bool { return !unicode.IsLetter(r) })); commonWords[core] ||
		(core == "" && n < PassphraseLength) {
		problems = append(problems, "it is a common password with digits or symbols around it")
	}
	if repetitive(password) {
		problems = append(problems, "it is one character repeated, or a run like 12345678 or abcdefgh")
	}
	if u := strings.ToLower(user); len(u) >= 3 && strings.Contains(lower, u) {
		problems = append(problems, "it contains the user name")
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("the password is too weak (%s): %s", strings.Join(problems, "; "), Requirement)
}

// classes counts the kinds of characters in s: lower case, upper case, digits, others.
func classes(s string) int {
	var lower, upper, digit, other bool
	for _, r := range s {
		switch {
		case unicode.IsLower(r):
			lower = true
		case unicode.IsUpper(r):
			upper = true
		case unicode.IsDigit(r):
			digit = true
		default:
			other = true
		}
	}
	n := 0
	for _, b := range []bool{lower, upper, digit, other} {
		if b {
			n++
		}
	}
	return n
}

// repetitive reports a password that is one character repeated, or whose characters all
// step by the same amount (+1 or -1: 12345678, abcdefgh, 98765432).
func repetitive(s string) bool {
	r := []rune(s)
	if len(r) < 2 {
		return true
	}
	step := r[1] - r[0]
	if step < -1 || step > 1 {
		return false
	}
	for i := 2; i < len(r); i++ {
		if r[i]-r[i-1] != step {
			return false
		}
	}
	return true
}
