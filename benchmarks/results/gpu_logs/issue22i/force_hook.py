"""Adds the SW_FORCE hook to a copy of paged_attention_bf16.cu (A/B builds only): SW_FORCE="path:splits" forces the
launch path (1 fused, 2 two launches, 3 three launches) and the split count. Usage: force_hook.py SRC DST"""
import sys
from pathlib import Path

src = Path(sys.argv[1]).read_text()
src = src.replace("#include <math.h>\n", "#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n", 1)
assert "  const bool fused = pdl &&" in src
src = src.replace("  const bool fused = pdl &&", "  bool fused = pdl &&")
anchors = ["    two_launches = pdl && units * splits >= kTwoLaunchMinBlocks && units * splits <= kTwoLaunchMaxBlocks;\n  }\n",
           "    two_launches = pdl && units * splits <= kTwoLaunchMaxBlocks;\n  }\n"]  # this change / HEAD
anchor = next(a for a in anchors if a in src)
src = src.replace(anchor, anchor + """  if (const char* sw = getenv("SW_FORCE")) {
    int sw_path = 0, sw_splits = 0;
    if (sscanf(sw, "%d:%d", &sw_path, &sw_splits) == 2 && sw_splits > 0) {
      splits = clamp_splits(sw_splits);
      fused = sw_path == 1 && pdl && splits <= max_cluster;
      two_launches = sw_path == 2 && pdl;
    }
  }
""")
Path(sys.argv[2]).write_text(src)
