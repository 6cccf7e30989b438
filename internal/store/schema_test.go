package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// keyFragments are pieces of every key and channel family of schema.go:
// a string literal holding one, anywhere but schema.go, is a key built
// outside the schema.
var keyFragments = []string{
	":result:", ":done:", ":cancel", ":stream:", ":langs", ":libs", ":envs", ":env-builds", "sandq-owner:",
	":sess-slots", ":sess-worker:", ":sess-cmds:", ":sess-reply:", ":session:", ":sessions:",
	":apikey", ":rate:", ":batch:", ":webhook", ":status:", ":tenant:", ":tenant-caps", ":tenants", ":lane:",
	":lanes", ":held:", ":releasing", ":fleet", ":recent-",
}

// No package but this one's schema.go writes a Redis key or channel name:
// every Go file of the module (tests of this package aside, which check
// the documented layout) is searched for string literals holding a key
// family's fragment. Literals that are not keys but happen to hold one
// (a JSON field, a status) are listed in allowed, each with its reason.
func TestKeysAreBuiltInTheSchemaOnly(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// file:literal pairs that hold a fragment but name no key.
	allowed := map[string]string{}
	found := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if !strings.HasSuffix(path, ".go") || rel == "internal/store/schema.go" ||
			strings.HasPrefix(rel, "internal/store/") && strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		found++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for _, frag := range keyFragments {
				if strings.Contains(v, frag) {
					if why, ok := allowed[rel+":"+v]; ok && why != "" {
						continue
					}
					t.Errorf("%s: string %q holds %s: Redis keys and channels are built in internal/store/schema.go only", fset.Position(lit.Pos()), v, frag)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 100 {
		t.Fatalf("searched %d Go files under %s: the walk missed the module", found, root)
	}
}
