package trial

import "sync"

// modelTables is what a generator needs of its model's parameters, made
// once per model for the whole process: a sweep runs the same few models
// trial after trial, and making the list, its index and the joined site
// names afresh for each was a few hundred heap objects per trial. The
// tables are read-only once made, so generators in several goroutines
// share them.
type modelTables struct {
	params []param
	pidx   map[siteKey]int
	// gradKind and castKind are each parameter's gradient and autocast
	// copy site kinds ("grad."+kind, kind+".autocast").
	gradKind, castKind []string
	// groups are optimizer.go's two parameter groups (weight decay, none).
	groups [2][]int
	count  uint64 // elements in all
}

func newModelTables(m Model) *modelTables {
	t := &modelTables{params: m.params()}
	t.pidx = make(map[siteKey]int, len(t.params))
	t.gradKind = make([]string, len(t.params))
	t.castKind = make([]string, len(t.params))
	for i, p := range t.params {
		t.pidx[p.site] = i
		t.gradKind[i] = "grad." + p.site.kind
		t.castKind[i] = p.site.kind + ".autocast"
		t.count += p.elems
		if p.decay {
			t.groups[0] = append(t.groups[0], i)
		} else {
			t.groups[1] = append(t.groups[1], i)
		}
	}
	return t
}

// maxCachedModels bounds the cache: a study draws from a few models, but a
// program making custom shapes by the thousand should not keep them all.
const maxCachedModels = 64

var tableCache struct {
	sync.Mutex
	m map[Model]*modelTables
}

// tablesOf returns m's tables, from the cache when it has them.
func tablesOf(m Model) *modelTables {
	tableCache.Lock()
	defer tableCache.Unlock()
	if t, ok := tableCache.m[m]; ok {
		return t
	}
	t := newModelTables(m)
	if tableCache.m == nil {
		tableCache.m = map[Model]*modelTables{}
	}
	if len(tableCache.m) < maxCachedModels {
		tableCache.m[m] = t
	}
	return t
}
