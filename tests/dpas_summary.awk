# SPDX-License-Identifier: MIT
# One prefill kernel's line from its GEN assembly dump (tests/check_dpas.sh):
# label, kernel, SIMD width, instructions, spill bytes, dpas instructions,
# and the instructions a hardware thread issues per query-key pair (pair=)
# and per value element, a row's product with one channel of one token
# (elem=), in the kernel's token loop.
# Variables: label, D (head_dim), mode and file (the dump's name, which
# holds the SIMD width), and
#   mode=dpas (kernels/prefill_dpas.cl), R: rows of a tile. The token loop
#     is the outermost loop holding dpas; one turn of it takes 16 tokens
#     for the sub-group's R rows. Its inner loops stage K and V (counted
#     apart: stage=, instructions a turn); the rest, before its first exp
#     (scores, masks, row maxima), is the score part, R x 16 pairs; from
#     the exp on (weights, rescale, value products) the value part,
#     R x 16 x D elements.
#   mode=tiled (kernels/paged_attention_tiled.cl): the innermost loops
#     in a token loop run over head_dim / 4 channel runs for one token of
#     each lane's row (SIMD lanes); the one before the first exp scores,
#     the one after adds values. A pair costs the score loop's turns over
#     head_dim plus its enclosing loop's other instructions, per lane; an
#     element the value loop's turn over 4 channels plus its enclosing
#     loop's other instructions over head_dim, per lane. Staging (the
#     loop that loads the chunk to local memory) is left out, as in
#     mode=dpas.
# n and nl start at 0, not "": awk would file the first instruction and
# the first loop under the subscript "".
BEGIN { n = 0; nl = 0 }
/^\/\/\.kernel / { kernel = $2 }
/^\/\/\.instCount / { inst = $2 }
/^\/\/\.spill size / { spill = $3 }
/^\/\// { next }
/^[ \t]*$/ { next }
/^[A-Za-z_0-9]+:[ \t]*$/ { sub(/:.*/, ""); lab[$0] = n; next }
{
    code = $0; sub(/\/\/.*/, "", code)
    op = ""
    for (i = 1; i <= split(code, w, /[ \t]+/); i++)
        if (w[i] != "" && w[i] !~ /^\(/) { op = w[i]; break }
    sub(/\..*/, "", op)
    opc[n] = op
    isexp[n] = op == "math" && code ~ /exp/
    if (op == "dpas") dpas++
    if (op == "while" || op == "jmpi" || op == "goto")
        for (i = split(code, w, /[ \t]+/); i > 0; i--)
            if ((w[i] in lab) && lab[w[i]] <= n) {
                ls[nl] = lab[w[i]]; le[nl] = n; nl++; break
            }
    n++
}
# Whether loop a lies inside loop b.
function inside(a, b) { return a != b && ls[a] >= ls[b] && le[a] <= le[b] }
function len(a) { return le[a] - ls[a] + 1 }
END {
    simd = file; sub(/.*_simd/, "", simd); sub(/_.*/, "", simd)
    out = sprintf("%s %s simd%s inst=%d spill=%d dpas=%d", label, kernel,
                  simd, inst, spill + 0, dpas + 0)
    if (mode == "dpas") {
        tl = -1
        for (l = 0; l < nl; l++) {
            has = 0
            for (k = ls[l]; k <= le[l]; k++) if (opc[k] == "dpas") has = 1
            if (has && (tl < 0 || inside(tl, l))) tl = l
        }
        if (tl >= 0) {
            stage = score = value = 0; seen_exp = 0
            for (k = ls[tl]; k <= le[tl]; k++) {
                staged = 0
                for (l = 0; l < nl; l++)
                    if (inside(l, tl) && k >= ls[l] && k <= le[l]) staged = 1
                if (staged) { stage++; continue }
                if (isexp[k]) seen_exp = 1
                if (seen_exp) value++; else score++
            }
            out = out sprintf(" stage=%d score=%d value=%d pair=%.3f elem=%.4f",
                              stage, score, value, score / (R * 16),
                              value / (R * 16 * D))
        }
    } else if (mode == "tiled") {
        firstexp = -1
        for (k = 0; k < n && firstexp < 0; k++) if (isexp[k]) firstexp = k
        # The innermost loops whose enclosing loop is smallest (a token
        # loop; the others sit in the chunk loop: staging, rescaling).
        sl = vl = sp = vp = -1
        for (l = 0; l < nl; l++) {
            inner = 0; p = -1
            for (m = 0; m < nl; m++) {
                if (inside(m, l)) inner = 1
                if (inside(l, m) && (p < 0 || len(m) < len(p))) p = m
            }
            if (inner || p < 0) continue
            if (ls[l] < firstexp && (sp < 0 || len(p) < len(sp))) {
                sl = l; sp = p
            }
            if (ls[l] > firstexp && (vp < 0 || len(p) < len(vp))) {
                vl = l; vp = p
            }
        }
        if (sl >= 0 && vl >= 0 && sp >= 0 && vp >= 0)
            out = out sprintf(" score_loop=%d value_loop=%d" \
                              " pair=%.3f elem=%.4f", len(sl), len(vl),
                              (len(sl) * D / 4 + len(sp) - len(sl)) / simd,
                              (len(vl) / 4 + (len(vp) - len(vl)) / D) / simd)
    }
    print out
}
