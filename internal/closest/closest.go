// Package closest finds the names nearest to a name that names nothing, so
// that a message can say what was likely meant (seed 004's error
// guidance: "Did you mean ...?").
package closest

import "sort"

// Names returns up to n of names nearest to name by edit distance, the
// nearest first, ties by name.
func Names(name string, names []string, n int) []string {
	type scored struct {
		name string
		d    int
	}
	var all []scored
	for _, c := range names {
		all = append(all, scored{c, Distance(name, c)})
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].d != all[j].d {
			return all[i].d < all[j].d
		}
		return all[i].name < all[j].name
	})
	var out []string
	for i := 0; i < len(all) && i < n; i++ {
		out = append(out, all[i].name)
	}
	return out
}

// Distance is the Levenshtein distance between a and b, by bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
