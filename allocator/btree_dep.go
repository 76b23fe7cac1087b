package allocator

import _ "github.com/google/btree"
