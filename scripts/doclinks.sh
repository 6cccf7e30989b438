#!/usr/bin/env bash
# doclinks.sh: check the docs (README.md, CHANGELOG.md, CONTRIBUTING.md, docs/**/*.md). Run from anywhere, with no
# arguments; exits 1 and lists every problem when:
#   - a relative link (inline [text](target) or a [label]: target definition, outside code)
#     points to a file that does not exist, or to a #heading the target Markdown file lacks
#     (GitHub's heading anchors);
#   - README.md is longer than 300 lines;
#   - a doc names a Go test, benchmark, fuzz or example function (TestFoo, BenchmarkFoo, ...):
#     describe what is tested instead, names move;
#   - a doc names a commit hash: 7 to 40 hex digits with both a digit and a letter, or a run of
#     only digits (or only letters a-f) that names a commit of this repository.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export LC_ALL=C

readonly README_MAX_LINES=300
problems=0

fail() { # fail FILE LINE MESSAGE
	printf 'doclinks: %s:%s: %s\n' "$1" "$2" "$3" >&2
	problems=$((problems + 1))
}

docs=(README.md CHANGELOG.md CONTRIBUTING.md)
while IFS= read -r -d '' f; do
	docs+=("$f")
done < <(find docs -type f -name '*.md' -print0 | sort -z)

# prose FILE: the file's lines with fenced code blocks blanked and inline code spans removed,
# line numbers kept, so links inside code are not taken for links.
prose() {
	awk '
		/^[ \t]*(```|~~~)/ { fence = !fence; print ""; next }
		fence { print ""; next }
		{ gsub(/`[^`]*`/, ""); print }
	' "$1"
}

# anchors FILE: the GitHub anchor of every heading of FILE, one a line (a repeated heading gets
# -1, -2, ... as on GitHub).
anchors() {
	prose "$1" | sed -n 's/^#\{1,6\}[ \t]\{1,\}//p' | while IFS= read -r heading; do
		heading=${heading,,}
		heading=$(printf '%s' "$heading" | sed 's/[^a-z0-9 _-]//g; s/ /-/g')
		printf '%s\n' "$heading"
	done | awk '{ n = seen[$0]++; print (n ? $0 "-" n : $0) }'
}

# check_link FILE LINE TARGET
check_link() {
	local file=$1 line=$2 target=$3 path anchor resolved
	target=${target#<}
	target=${target%>}
	target=${target%% *} # an optional "title"
	case $target in
	'' | [a-zA-Z]*:*) return 0 ;; # http:, https:, mailto:, ...
	esac
	path=${target%%#*}
	anchor=
	[[ $target == *'#'* ]] && anchor=${target#*#}
	if [ -z "$path" ]; then
		resolved=$file
	elif [[ $path == /* ]]; then
		resolved=.${path}
	else
		resolved=$(dirname "$file")/$path
	fi
	if [ ! -e "$resolved" ]; then
		fail "$file" "$line" "link to a missing file: $target"
		return 0
	fi
	if [ -n "$anchor" ]; then
		if [[ $resolved != *.md ]] || [ -d "$resolved" ]; then
			fail "$file" "$line" "anchor on a file that is not Markdown: $target"
		elif ! anchors "$resolved" | grep -qxF -- "$anchor"; then
			fail "$file" "$line" "link to a missing heading: $target"
		fi
	fi
}

for f in "${docs[@]}"; do
	[ -f "$f" ] || { fail "$f" 0 "missing"; continue; }

	# Links: inline ones, then reference definitions.
	while IFS=: read -r line rest; do
		while [[ $rest =~ \]\(([^\)]*)\) ]]; do
			check_link "$f" "$line" "${BASH_REMATCH[1]}"
			rest=${rest#*"${BASH_REMATCH[0]}"}
		done
	done < <(prose "$f" | grep -n '](' || true)
	while IFS=: read -r line rest; do
		[[ $rest =~ ^[[:space:]]*\[[^]]+\]:[[:space:]]*([^[:space:]]+) ]] &&
			check_link "$f" "$line" "${BASH_REMATCH[1]}"
	done < <(prose "$f" | grep -nE '^[[:space:]]*\[[^]]+\]:' || true)

	# Test functions and commit hashes, anywhere in the file (code blocks too).
	while IFS=: read -r line match; do
		fail "$f" "$line" "names a Go test function ($match): describe what is tested instead"
	done < <(grep -noE '(^|[^A-Za-z0-9_])(Test|Benchmark|Fuzz|Example)[A-Z][A-Za-z0-9_]*' "$f" |
		sed 's/:[^A-Za-z0-9_]*\(Test\|Benchmark\|Fuzz\|Example\)/:\1/' || true)
	while IFS=: read -r line match; do
		if [[ ! ($match =~ [0-9] && $match =~ [a-f]) ]]; then
			# 1065535 is a number and "defaced" a word, unless this repository has such a commit.
			git rev-parse -q --verify "$match^{commit}" >/dev/null 2>&1 || continue
		fi
		fail "$f" "$line" "names what looks like a commit hash ($match)"
	done < <(grep -noE '(^|[^A-Za-z0-9_])[0-9a-f]{7,40}([^A-Za-z0-9_]|$)' "$f" |
		sed 's/:[^0-9a-f]*\([0-9a-f]\{7,40\}\)[^0-9a-f]*$/:\1/' || true)
done

lines=$(wc -l <README.md)
if [ "$lines" -gt "$README_MAX_LINES" ]; then
	fail README.md "$lines" "README.md has $lines lines; at most $README_MAX_LINES (move reference to docs/)"
fi

if [ "$problems" -gt 0 ]; then
	printf 'doclinks: %d problem(s)\n' "$problems" >&2
	exit 1
fi
echo "doclinks: ${#docs[@]} docs checked, links resolve, README.md $lines lines"
