# SPDX-License-Identifier: MIT
# One kernel's line from its GEN assembly dump (tests/check_isa.sh):
# device, program label, kernel, SIMD width, instructions, spill bytes,
# private memory bytes and, for decode partials (G > 0), the hottest
# loops' cost per KV byte.
# Variables: dev, label, G (query heads a KV head, 0 for no loop figures),
# keb and veb (K and V element bytes), file (the dump's name, which holds
# the SIMD width), stateless (the private memory a work-item keeps in
# global memory, from the dump's .cos: PerThreadPrivateMemorySize; Xe-HPG
# puts run-time indexed arrays there and its .asm header does not say).
# private= is the .asm's figure (scratch a hardware thread keeps, Gen12),
# stateless= the .cos's; either above 0 is private memory.
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
# instruction 2 cycles, sends (Xe-HPG's dumps spell its memory messages
# load, store and atomic) and control flow 0 (docs/performance.md, "Intel
# GPU code", has the model that uses them).
#
# For the other attention kernels (prefill: the kernel's loops straddle an
# exp), the hot loops' cost per product, a product being one lane's float
# mul or mad (a mul then add is one product, the add a cost): the score
# loop multiplies one channel of a query by the same channel of a key
# (head_dim products a query-key pair), the value loop one channel of a
# value by a row's weight (one product a value element). The hot loop of a
# pass is its deepest innermost loop with products (the staging, rescale
# and store loops sit outside the token loops), the most products a turn
# breaking a tie; before the first exp it scores, after it weighs values.
# qk_inst/pv_inst: instructions a hardware thread issues per product;
# qk_cyc/pv_cyc: cycles of the EU's 8-wide ALU per product, by the rule
# above (the f32 floor is 0.125: a SIMD8 mad does 8 in 1 cycle, a SIMD16
# one 16 in 2; f16 arithmetic counts the same, though Gen12 and Xe-HPG
# issue it at twice the rate); qk_send/pv_send: sends per product (not in
# the cycles: loads from local and private memory). The per-token work
# around the hot loop (the score's horizontal sum, the exp, the running
# sum) is left out, as the decode figures leave out the softmax.
BEGIN { n = 0; nl = 0 }
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
    # A product: a float mul or mad (the destination, the first typed
    # operand, is :f or :hf), one a lane of its execution size.
    prod[n] = 0
    if ((op == "mul" || op == "mad") && match(code, /:[a-z]+/) &&
        (substr(code, RSTART, RLENGTH) == ":f" ||
         substr(code, RSTART, RLENGTH) == ":hf")) {
        prod[n] = 1
        if (match(code, /\([0-9]+\|M[0-9]+\)/)) {
            prod[n] = substr(code, RSTART + 1, RLENGTH - 2)
            sub(/\|.*/, "", prod[n])
        }
    }
    # Scalar regions: <0> or <0;0> (three-source syntax) or <0;1,0>.
    scalars[n] = gsub(/<0>|<0;0>|<0;1,0>/, "&", code)
    n++
}
function send(k) { return opc[k] ~ /^(send|sendc|load|store|atomic)$/ }
function cyc(k,   m, s) {
    if (send(k) || opc[k] ~ /^(sync|if|else|endif|while|break|cont)$/ ||
        opc[k] ~ /^(jmpi|goto|join|nop|halt)$/)
        return 0
    s = 1
    if (match(line[k], /\([0-9]+\|M[0-9]+\)/)) {
        m = substr(line[k], RSTART + 1, RLENGTH - 2); sub(/\|.*/, "", m)
        s = int(m / 8); if (s < 1) s = 1
    }
    return s
}
# The hot loop of a pass: the deeper of loops a and b (b < 0: none yet),
# the one with more products a turn at equal depth.
function deeper(a, b) {
    if (b < 0 || depth[a] > depth[b] ||
        (depth[a] == depth[b] && lprod[a] > lprod[b]))
        return a
    return b
}
function per_product(name, l,   k, c, sends) {
    c = sends = 0
    for (k = lstart[l]; k <= lend[l]; k++) {
        c += cyc(k)
        if (send(k)) sends++
    }
    printf " %s_inst=%.3f %s_cyc=%.3f %s_send=%.3f", name,
        (lend[l] - lstart[l] + 1) / lprod[l], name, c / lprod[l], name,
        sends / lprod[l]
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
    # Prefill and the other attention kernels: the hot loop of each pass.
    qk_l = pv_l = -1
    prefill = kernel !~ /^pkv_decode/ && firstexp != ""
    for (l = 0; l < nl && prefill; l++) {
        inner = 0; depth[l] = 0
        for (k = 0; k < nl; k++) {
            if (k == l) continue
            if (lstart[k] >= lstart[l] && lend[k] <= lend[l]) inner = 1
            if (lstart[k] <= lstart[l] && lend[k] >= lend[l]) depth[l]++
        }
        lprod[l] = 0
        for (k = lstart[l]; k <= lend[l]; k++) lprod[l] += prod[k]
        if (inner || lprod[l] == 0) continue
        if (lstart[l] < firstexp) qk_l = deeper(l, qk_l)
        else pv_l = deeper(l, pv_l)
    }
    printf "%s %s %s simd%s inst=%d spill=%d private=%d stateless=%d", dev, label, kernel, simd, inst, spill, priv, stateless
    # A pass whose loop the compiler unrolled away has no figure.
    if (kb_c > 0)
        printf " kb_inst=%.3f kb_cyc=%.3f", kb_i, kb_c
    if (vb_c > 0)
        printf " vb_inst=%.3f vb_cyc=%.3f", vb_i, vb_c
    if (qk_l >= 0 && pv_l >= 0) {
        per_product("qk", qk_l)
        per_product("pv", pv_l)
    }
    printf "\n"
}