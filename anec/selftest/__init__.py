"""``python -m anec.selftest``: check on this machine the device claims anec relies on.

anec's compiler and runtime are built on a catalog of ANE constraints measured
by others on a few chips (``anec constraints``). This self-test runs small
programs through the public API on the chosen backend and checks the claims
that decide whether results are right:

legalized     a program using gelu, rsqrt (layer norm), conv bias, concat,
              reduce_mean and softmax, compiled by the default pipeline with
              random weights, matches the reference interpreter;
unlegalized   raw MIL using gelu or rsqrt is rejected by the device
              compiler, while the same MIL with relu instead compiles and runs;
concat        whether the device takes concat (ANE-CONCAT is contested: Orion
              reports it rejected, maderix's kernels run it): raw MIL joining
              two tensors along channels is compiled and run, and compared
              bit for bit with the inputs joined; if that holds, an anec
              program compiled with --concat native must match the reference
              interpreter. The verdict (accepted / rejected / accepted but
              wrong) is cached with the reload verdict, and anec compile keeps
              concat only for this Mac's target when it is "accepted";
binding       inputs and outputs are bound in alphabetical order of their MIL
              names: through the runtime (by name) and at the device level
              (buffers passed in alphabetical order) a two-input, two-output
              program whose declaration order is not alphabetical is right;
min-surface   a program whose tensors are below the minimum surface size:
              the runtime pads its surfaces and the result is right; exact-size
              buffers either fail at evaluate or give the right result (which
              one is reported);
reload        which reload strategies really change outputs here, each
              forced and probed on its own on a one-tensor and a packed
              two-tensor program and compared with a fresh compile: the data
              patch (the SAME model object unloaded, the new BLOBFILE written
              as its compiled data, loaded again) and the new object (a NEW
              never-compiled object whose directory holds the compiled network
              and the new data, loaded; the path Orion's delta test shows).
              Then the runtime's own choice, with that verdict, must equal a
              fresh compile bit for bit. On a Mac the verdict is cached and
              every later Runtime uses it;
shared        two programs with the same MIL and weight paths but different
              weights (the second served from the cache when it can be) are
              loaded at the same time and each computes with its own weights;
state         inputs that stay in their surfaces between calls (ANE-INPUT-RESIDENT): a
              cache and a mask written into a program once, then one row and one
              mask column at a time in place (a KV cache's decode steps), give
              the same outputs bit for bit as a second program of the artifact
              given both whole on every call, and match the reference;
dialect       which MIL dialects the device compiler accepts (ios18, the
              default, and ios16, the fallback `--dialect ios16` writes);
fp16-range    RMSNorm and LayerNorm, written as mean(x * x), over rows whose
              largest |x| is 1, 3000 and 60000 (x * x overflows fp16 past 256)
              match float64 numpy: the range-safe pass's form (reduce_max,
              pow(s, -1), rows scaled before squaring) computes on the device
              as on the sim. Whether the device keeps fp16 subnormals (the
              rstd a LayerNorm returns at |x| ~ 16000 and above is one) is a
              hypothesis this check settles for the norms.
spatial       the native spatial ops select-native writes (conv with a kernel,
              stride, dilation and groups, conv_transpose, max_pool, avg_pool,
              upsample_nearest_neighbor, upsample_bilinear), each at the limits
              anec assumes (ANE-SPATIAL-LIMITS: kernel 16, stride 8, dilation
              8, padding one below the kernel extent, upsample scale 16),
              compile and match the reference interpreter; one step beyond the
              kernel limit is probed too and reported (accepted or rejected),
              which tells whether the limits can be raised on this machine.
compressed    which compressed weight forms the device compiles and computes
              right (ANE-COMPRESSED-WEIGHTS): a conv weight and a matmul weight
              stored as int8 with constexpr_affine_dequantize (the form
              anec writes by default) and with constexpr_blockwise_shift_scale
              (--compress-form blockwise), as 4- and 6-bit LUTs
              (constexpr_lut_to_dense) and 50% sparse (constexpr_sparse_to_dense,
              ANE-COMPRESSED-SPARSE; with int8 and 4-bit LUT values too), each
              compared with the reference interpreter on the decompressed
              weights. Passes when the target's int8 form is right and no form
              computes wrong values; a rejected other form is reported (do not
              compile with it on this machine).

On a Mac with Apple silicon it runs on the ANE (``--backend auto`` picks it);
on Linux it runs on the sim, where it must pass. It prints a plain-text
report to paste into an issue (``--json`` for JSON); the exit status is 0
if and only if every check passes. The programs are in
:mod:`anec.selftest.programs`, the checks in :mod:`anec.selftest.checks`,
running and reporting in :mod:`anec.selftest.runner`.
"""

from anec.selftest.runner import main, render, run_selftest

__all__ = ["main", "render", "run_selftest"]
