// Package migrations embeds every service's SQL migrations
// (migrations/<service>/NNNN_<slug>.sql). A landed migration is never edited;
// changes come as new files.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed */*.sql
var all embed.FS

// For returns the migrations of one service (its directory).
func For(service string) fs.FS {
	sub, err := fs.Sub(all, service)
	if err != nil {
		panic(err) // only for a name that is not a literal directory
	}
	return sub
}
