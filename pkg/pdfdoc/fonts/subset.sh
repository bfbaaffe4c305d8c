#!/bin/sh
# Makes wqy-microhei-subset.ttf, the font pkg/pdfdoc embeds for text the
# core Helvetica cannot print (Chinese above all). Run at development time
# only; the build and the binaries use the committed file, nothing installed.
#
#   apt-get install -y fonts-wqy-microhei python3-fonttools
#   sh pkg/pdfdoc/fonts/subset.sh
#
# The source is WenQuanYi Micro Hei 0.2.0-beta (Debian's fonts-wqy-microhei,
# face 0 of wqy-microhei.ttc), Apache-2.0 (see LICENSE and NOTICE). Kept:
# Latin (Basic, Latin-1, Extended-A/B), Greek, Cyrillic, general punctuation,
# currency and letterlike symbols, arrows, mathematical operators, CJK
# symbols and punctuation, kana, CJK Unified Ideographs, and half/fullwidth
# forms; hinting and the layout tables go (fpdf uses neither). Not Hangul:
# fpdf reads every code point of the font into maps, twice, for each
# document that uses it (about 25 ms of CPU and 20 MB of garbage for this
# file), and Hangul's 11 172 syllables would be a third of the code points,
# for a script gpubill's documents do not meet (a Hangul syllable prints as
# its code point, [U+AC00]). fpdf reads only the cmap's format 4 subtable:
# every code point kept is in the Basic Multilingual Plane. /usr/bin/python3:
# Debian's, which has python3-fonttools.
set -eu
cd "$(dirname "$0")"
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
/usr/bin/python3 - "$src/wqy-microhei.ttf" <<'PY'
import sys
from fontTools.ttLib import TTCollection
face = TTCollection('/usr/share/fonts/truetype/wqy/wqy-microhei.ttc').fonts[0]
face.recalcTimestamp = False  # the same file on every run
face.save(sys.argv[1])
PY
/usr/bin/python3 -m fontTools.subset "$src/wqy-microhei.ttf" \
	--unicodes='U+0020-007E,U+00A0-024F,U+0370-03FF,U+0400-04FF,U+2000-206F,U+20A0-20CF,U+2100-214F,U+2190-21FF,U+2200-22FF,U+3000-303F,U+3040-30FF,U+4E00-9FFF,U+FF00-FFEF' \
	--no-hinting --layout-features='' --drop-tables+=GSUB,GPOS,GDEF,vhea,vmtx,FFTM --name-IDs='*' \
	--output-file=wqy-microhei-subset.ttf
