"""The parameter shapes of real models, generated from their architectures (torchvision and the
model hubs are not usable here), and a module whose gradients are exactly that set.

The shapes follow torchvision's resnet50 (161 tensors, 25,557,032 parameters) and resnet18 (62
tensors, 11,689,512 parameters: the smoke test's smaller set) and Hugging Face's bert-base-uncased
BertModel with its pooler (199 tensors, 109,482,240 parameters), in the order the models register
them (forward order): backward produces the gradients in the reverse order, as a real model does."""

import math


def resnet_shapes(blocks, bottleneck):
    """(name, shape) of every parameter of a torchvision ResNet: stem, four stages of basic
    (expansion 1) or bottleneck (expansion 4) blocks with a projection where the shape changes, fc."""
    shapes = [("conv1.weight", (64, 3, 7, 7)), ("bn1.weight", (64,)), ("bn1.bias", (64,))]
    expansion = 4 if bottleneck else 1
    in_ch = 64
    for layer, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512)), start=1):
        out_ch = width * expansion
        for b in range(n):
            p = f"layer{layer}.{b}"
            convs = ([(in_ch, width, 1), (width, width, 3), (width, out_ch, 1)] if bottleneck
                     else [(in_ch, width, 3), (width, width, 3)])
            for i, (cin, cout, k) in enumerate(convs, start=1):
                shapes += [(f"{p}.conv{i}.weight", (cout, cin, k, k)),
                           (f"{p}.bn{i}.weight", (cout,)), (f"{p}.bn{i}.bias", (cout,))]
            # torchvision projects the shortcut when the stride (first block of stages 2-4) or
            # the channel count changes.
            if b == 0 and (layer > 1 or in_ch != out_ch):
                shapes += [(f"{p}.downsample.0.weight", (out_ch, in_ch, 1, 1)),
                           (f"{p}.downsample.1.weight", (out_ch,)), (f"{p}.downsample.1.bias", (out_ch,))]
            in_ch = out_ch
    shapes += [("fc.weight", (1000, 512 * expansion)), ("fc.bias", (1000,))]
    return shapes


def resnet50_shapes():
    return resnet_shapes((3, 4, 6, 3), bottleneck=True)


def resnet18_shapes():
    return resnet_shapes((2, 2, 2, 2), bottleneck=False)


def bert_base_shapes(vocab=30522, hidden=768, layers=12, intermediate=3072, max_positions=512,
                     type_vocab=2):
    """(name, shape) of every parameter of BERT-base (BertModel: embeddings, 12 layers, pooler)."""
    h = hidden
    shapes = [("embeddings.word_embeddings.weight", (vocab, h)),
              ("embeddings.position_embeddings.weight", (max_positions, h)),
              ("embeddings.token_type_embeddings.weight", (type_vocab, h)),
              ("embeddings.LayerNorm.weight", (h,)), ("embeddings.LayerNorm.bias", (h,))]
    for i in range(layers):
        p = f"encoder.layer.{i}"
        for proj in ("query", "key", "value"):
            shapes += [(f"{p}.attention.self.{proj}.weight", (h, h)), (f"{p}.attention.self.{proj}.bias", (h,))]
        shapes += [(f"{p}.attention.output.dense.weight", (h, h)), (f"{p}.attention.output.dense.bias", (h,)),
                   (f"{p}.attention.output.LayerNorm.weight", (h,)), (f"{p}.attention.output.LayerNorm.bias", (h,)),
                   (f"{p}.intermediate.dense.weight", (intermediate, h)),
                   (f"{p}.intermediate.dense.bias", (intermediate,)),
                   (f"{p}.output.dense.weight", (h, intermediate)), (f"{p}.output.dense.bias", (h,)),
                   (f"{p}.output.LayerNorm.weight", (h,)), (f"{p}.output.LayerNorm.bias", (h,))]
    shapes += [("pooler.dense.weight", (h, h)), ("pooler.dense.bias", (h,))]
    return shapes


GRADIENT_SETS = {"resnet50": resnet50_shapes, "bert-base": bert_base_shapes, "resnet18": resnet18_shapes}


def describe(name):
    shapes = GRADIENT_SETS[name]()
    return {"tensors": len(shapes), "params": sum(math.prod(s) for _, s in shapes)}


def gradient_set_module(name):
    """A torch module with one parameter per entry of the set. forward(coef) returns a scalar whose
    backward gives every parameter the gradient `coef` (filled), produced last parameter first."""
    import torch

    class GradientSet(torch.nn.Module):
        def __init__(self, shapes):
            super().__init__()
            # Parameter names cannot contain dots; keep the model's names recognisable.
            self.order = []
            for pname, shape in shapes:
                attr = pname.replace(".", "_")
                self.register_parameter(attr, torch.nn.Parameter(torch.zeros(shape)))
                self.order.append(attr)

        def forward(self, coef):
            # A chain over the parameters in forward order: autograd runs it backwards, so the
            # last parameter's gradient is ready first, as in a real network.
            acc = coef.new_zeros(())
            for attr in self.order:
                acc = acc + getattr(self, attr).sum()
            return acc * coef

    return GradientSet(GRADIENT_SETS[name]())
