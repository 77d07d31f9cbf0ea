"""ResNet-style CNN op graphs (torchvision module names), optionally with a Semantic FPN head.

Each convolution is followed by batch norm and (mostly) ReLU; residual blocks end in an add.
``bottleneck=True`` gives ResNet-50/101/152 blocks (1x1, 3x3, 1x1 with 4x expansion; blocks
"3,4,6,3", "3,4,23,3", "3,8,36,3"); ``False`` gives ResNet-18/34 basic blocks ("2,2,2,2",
"3,4,6,3").  ``fpn=True`` replaces the classifier with a Semantic FPN neck and head (Kirillov
et al.; the SemanticFPN of Parmesan Table VII: ResNet-50 backbone, 150 classes, 512x512 images).
Convolution FLOPs: 2·Cin·Cout·k²·Hout·Wout·batch; times from the device table (docs/generators.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from solvers.generate._graph import CostParams, GraphBuilder
from solvers.generate._params import one_of, positive
from solvers.generate.devices import COMPUTE_EFFICIENCY, MEMORY_EFFICIENCY
from solvers.model.errors import InvalidInput
from solvers.model.graph import Node, OpGraph


@dataclass
class _Net:
    """Builder state: the graph plus batch size and element size."""

    b: GraphBuilder
    batch: int
    e: int

    def conv(self, nid: str, layer: str, x: str | None, cin: int, cout: int, k: int, stride: int,
             size: int) -> tuple[str, int]:
        """A k x k convolution (``x=None``: the model input, no producer op)."""
        out = (size + stride - 1) // stride
        self.b.op(nid, "aten.convolution", layer, [x] if x else [], out_bytes=self.batch * cout * out * out * self.e,
                  flops=2 * cin * cout * k * k * out * out * self.batch, param_bytes=cin * cout * k * k * self.e,
                  matmul=True, bwd_factor=2.0)
        return nid, out

    def pointwise(self, nid: str, op: str, layer: str, inputs: list[str], channels: int, size: int,
                  params: int = 0, flops_per_elem: int = 1) -> str:
        elems = self.batch * channels * size * size
        return self.b.op(nid, op, layer, inputs, out_bytes=elems * self.e, flops=flops_per_elem * elems,
                         param_bytes=params * self.e)

    def conv_bn(self, nid: str, layer: str, x: str, cin: int, cout: int, k: int, stride: int, size: int,
                relu: bool = True) -> tuple[str, int]:
        """conv -> batch_norm (-> relu), named ``{nid}``, ``{nid}.bn``, ``{nid}.relu``."""
        c, out = self.conv(nid, layer, x, cin, cout, k, stride, size)
        y = self.pointwise(f"{nid}.bn", "aten.batch_norm", layer, [c], cout, out, params=2 * cout, flops_per_elem=4)
        if relu:
            y = self.pointwise(f"{nid}.relu", "aten.relu", layer, [y], cout, out)
        return y, out


def _block(net: _Net, x: str, layer: str, cin: int, width: int, stride: int, size: int,
           bottleneck: bool) -> tuple[str, int, int]:
    """One residual block; returns (output op, channels, spatial size)."""
    if bottleneck:
        cout = 4 * width
        y, s = net.conv_bn(f"{layer}.conv1", layer, x, cin, width, 1, 1, size)
        y, s = net.conv_bn(f"{layer}.conv2", layer, y, width, width, 3, stride, s)
        y, s = net.conv_bn(f"{layer}.conv3", layer, y, width, cout, 1, 1, s, relu=False)
    else:
        cout = width
        y, s = net.conv_bn(f"{layer}.conv1", layer, x, cin, width, 3, stride, size)
        y, s = net.conv_bn(f"{layer}.conv2", layer, y, width, cout, 3, 1, s, relu=False)
    skip = x
    if stride != 1 or cin != cout:
        skip, _ = net.conv_bn(f"{layer}.downsample.0", layer, x, cin, cout, 1, stride, size, relu=False)
    y = net.pointwise(f"{layer}.add", "aten.add", layer, [y, skip], cout, s)
    return net.pointwise(f"{layer}.relu", "aten.relu", layer, [y], cout, s), cout, s


def _fpn(net: _Net, feats: list[tuple[str, int, int]], channels: int, classes: int, image: int) -> None:
    """Semantic FPN: lateral 1x1 convs, top-down upsample + add, 3x3 outputs, per-level head to 1/4."""
    lat = [net.conv(f"neck.lateral_convs.{i}", "neck", x, c, channels, 1, 1, s)[0] for i, (x, c, s) in enumerate(feats)]
    tops = [lat[-1]]
    for i in range(len(feats) - 2, -1, -1):
        s = feats[i][2]
        up = net.pointwise(f"neck.upsample.{i}", "aten.upsample_nearest2d", "neck", [tops[0]], channels, s)
        tops.insert(0, net.pointwise(f"neck.add.{i}", "aten.add", "neck", [lat[i], up], channels, s))
    head_ch = channels // 2
    summed = None
    base = feats[0][2]
    for i, (top, (_, _, s)) in enumerate(zip(tops, feats, strict=True)):
        y, s = net.conv(f"neck.fpn_convs.{i}", "neck", top, channels, channels, 3, 1, s)
        cin = channels
        for k in range(max(1, i)):  # level i (1/2^i of the base scale): i conv + 2x upsample steps
            y, s = net.conv_bn(f"decode_head.scale_heads.{i}.{k}.conv", f"decode_head.scale_heads.{i}", y, cin,
                               head_ch, 3, 1, s)
            cin = head_ch
            if i > 0:
                s *= 2
                y = net.pointwise(f"decode_head.scale_heads.{i}.{k}.upsample", "aten.upsample_bilinear2d",
                                  f"decode_head.scale_heads.{i}", [y], head_ch, s)
        summed = y if summed is None else net.pointwise(f"decode_head.add.{i}", "aten.add", "decode_head",
                                                        [summed, y], head_ch, base)
    assert summed is not None
    logits, _ = net.conv("decode_head.conv_seg", "decode_head", summed, head_ch, classes, 1, 1, base)
    up = net.pointwise("decode_head.resize", "aten.upsample_bilinear2d", "decode_head", [logits], classes, image)
    logp = net.pointwise("loss.log_softmax", "aten._log_softmax", "loss", [up], classes, image, flops_per_elem=5)
    net.b.op("loss", "aten.nll_loss2d_forward", "loss", [logp], out_bytes=4, flops=net.batch * image * image)


def cnn(*, blocks: str = "3,4,6,3", bottleneck: bool = True, width: int = 64, image_size: int = 224,
        micro_batch: int = 32, num_classes: int = 1000, fpn: bool = False, fpn_channels: int = 256,
        dtype_bytes: int = 4, device: str = "V100", granularity: str = "op",
        compute_efficiency: float = COMPUTE_EFFICIENCY, memory_efficiency: float = MEMORY_EFFICIENCY,
        op_overhead_s: float = 0.0, name: str = "") -> OpGraph:
    """ResNet-style CNN (conv -> bn -> relu chains, residual adds), optionally with a Semantic FPN head."""
    try:
        stages = [int(n) for n in blocks.split(",")]
    except ValueError:
        raise InvalidInput(f"parameter 'blocks' must be comma-separated integers, got {blocks!r}",
                           field="blocks") from None
    for i, n in enumerate(stages):
        positive(n, f"blocks[{i}]")
    for pname, value in (("width", width), ("image_size", image_size), ("micro_batch", micro_batch),
                         ("num_classes", num_classes), ("fpn_channels", fpn_channels)):
        positive(value, pname)
    one_of(granularity, "granularity", ("op", "layer"))
    net = _Net(GraphBuilder(CostParams(device, dtype_bytes, compute_efficiency, memory_efficiency, op_overhead_s)),
               micro_batch, dtype_bytes)
    x, s = _stem(net, width, image_size)
    c, feats = width, []
    for i, n in enumerate(stages):
        for j in range(n):
            x, c, s = _block(net, x, f"layer{i + 1}.{j}", c, width * 2**i, 2 if (j == 0 and i > 0) else 1, s,
                             bottleneck)
        feats.append((x, c, s))
    if fpn:
        _fpn(net, feats, fpn_channels, num_classes, image_size)
    else:
        pool = net.b.op("avgpool", "aten.adaptive_avg_pool2d", "avgpool", [x], out_bytes=micro_batch * c * dtype_bytes,
                        flops=micro_batch * c * s * s)
        fc = net.b.op("fc", "aten.addmm", "fc", [pool], out_bytes=micro_batch * num_classes * dtype_bytes,
                      flops=2 * micro_batch * c * num_classes, param_bytes=(c + 1) * num_classes * dtype_bytes,
                      matmul=True, bwd_factor=2.0)
        logp = net.pointwise("loss.log_softmax", "aten._log_softmax", "loss", [fc], num_classes, 1, flops_per_elem=5)
        net.b.op("loss", "aten.nll_loss_forward", "loss", [logp], out_bytes=4, flops=micro_batch)
    model = ("semantic-fpn-" if fpn else "") + f"resnet-{'-'.join(str(n) for n in stages)}"
    attrs = {"generator": "cnn", "model": model, "blocks": stages, "bottleneck": bottleneck, "image_size": image_size,
             "device": device, "dtype_bytes": dtype_bytes}
    return net.b.build(name or model, micro_batch, attrs, granularity, _block_group)


def _stem(net: _Net, width: int, image_size: int) -> tuple[str, int]:
    """conv1 (7x7, stride 2) -> bn1 -> relu -> maxpool (3x3, stride 2)."""
    c, s = net.conv("conv1", "conv1", None, 3, width, 7, 2, image_size)
    y = net.pointwise("bn1", "aten.batch_norm", "bn1", [c], width, s, params=2 * width, flops_per_elem=4)
    y = net.pointwise("relu", "aten.relu", "relu", [y], width, s)
    s = (s + 1) // 2
    return net.pointwise("maxpool", "aten.max_pool2d", "maxpool", [y], width, s, flops_per_elem=9), s


def _block_group(node: Node) -> str:
    """Coarsening key: the residual block (``layer2.3``), else the module root."""
    parts = (node.layer or node.id).split(".")
    return ".".join(parts[:2]) if parts[0].startswith("layer") else parts[0]
