# SPDX-License-Identifier: MIT
# One kernel's line from its GEN assembly dump (tests/check_isa.sh):
# device, program label, kernel, SIMD width, instructions, spill bytes,
# private memory bytes and, for decode partials (G > 0), the hottest
# loops' cost per KV byte.
# Variables: dev, label, G (query heads a KV head, 0 for no loop figures),
# keb and veb (K and V element bytes), file (the dump's name, which holds
# the SIMD width).
#
# Each innermost loop with at least 8 G products streams KV (the loops
# over 16 channels of 16 tokens and over runs of 16 tokens; fewer are the
# one-token loops at a partition's edge); it reads (products / G) x 16
# lanes x element-bytes bytes a turn (one product per head per element a
# lane; u4: half a byte an element). A product is a mad with exactly one
# scalar operand: the query channel or the weight every lane takes from
# one lane. The mads that fold or dequantise parameters have none (per
# channel) or two (a token's lo and scale), and counting them as elements
# made the quantized figures lean low. Loops before the kernel's first exp
# are the score pass, after it the value pass.
# kb_inst/vb_inst: instructions per K and V byte of the costliest such
# loop; kb_cyc/vb_cyc: cycles of an 8-wide ALU per byte, a SIMD16
# instruction 2 cycles, sends and control flow 0 (docs/performance.md,
# "Intel GPU code", has the model that uses them).
/^\/\/\.kernel / { kernel = $2 }
/^\/\/\.instCount / { inst = $2 }
/^\/\/\.spill size / { spill = $3 }
/^\/\/\.private memory size / { priv = $4 }
/^\/\//  { next }
/^[ \t]*$/ { next }
/^[A-Za-z_0-9]+:[ \t]*$/ { sub(/:.*/, ""); lab[$0] = n; next }
{
    code = $0; sub(/\/\/.*/, "", code)
    line[n] = code
    # The opcode: the first word that is not a predicate.
    op = ""
    for (i = 1; i <= split(code, w, /[ \t]+/); i++)
        if (w[i] != "" && w[i] !~ /^\(/) { op = w[i]; break }
    sub(/\..*/, "", op)
    opc[n] = op
    if (op == "while" || op == "jmpi" || op == "goto")
        for (i = split(code, w, /[ \t]+/); i > 0; i--)
            if (w[i] in lab) {
                lstart[nl] = lab[w[i]]; lend[nl] = n; nl++; break
            }
    if (op == "math" && code ~ /exp/ && firstexp == "") firstexp = n
    # Scalar regions: <0> (three-source syntax) or <0;1,0>.
    scalars[n] = gsub(/<0>|<0;1,0>/, "&", code)
    n++
}
function cyc(k,   m, s) {
    if (opc[k] ~ /^(send|sendc|sync|if|else|endif|while|break|cont|jmpi|goto|join|nop|halt)$/) return 0
    s = 1
    if (match(line[k], /\([0-9]+\|M[0-9]+\)/)) {
        m = substr(line[k], RSTART + 1, RLENGTH - 2); sub(/\|.*/, "", m)
        s = int(m / 8); if (s < 1) s = 1
    }
    return s
}
END {
    simd = file; sub(/.*_simd/, "", simd); sub(/_.*/, "", simd)
    kb_i = kb_c = vb_i = vb_c = 0
    for (l = 0; l < nl && G > 0; l++) {
        inner = 0
        for (k = 0; k < nl; k++)
            if (k != l && lstart[k] >= lstart[l] && lend[k] <= lend[l]) inner = 1
        if (inner) continue
        prods = 0; c = 0
        for (k = lstart[l]; k <= lend[l]; k++) {
            if (opc[k] == "mad" && scalars[k] == 1) prods++
            c += cyc(k)
        }
        if (prods < 8 * G) continue
        ins = lend[l] - lstart[l] + 1
        if (firstexp == "" || lstart[l] < firstexp) {
            bytes = prods / G * 16 * keb
            if (c / bytes > kb_c) { kb_c = c / bytes; kb_i = ins / bytes }
        } else {
            bytes = prods / G * 16 * veb
            if (c / bytes > vb_c) { vb_c = c / bytes; vb_i = ins / bytes }
        }
    }
    printf "%s %s %s simd%s inst=%d spill=%d private=%d", dev, label, kernel, simd, inst, spill, priv
    # A pass whose loop the compiler unrolled away has no figure.
    if (kb_c > 0)
        printf " kb_inst=%.3f kb_cyc=%.3f", kb_i, kb_c
    if (vb_c > 0)
        printf " vb_inst=%.3f vb_cyc=%.3f", vb_i, vb_c
    printf "\n"
}