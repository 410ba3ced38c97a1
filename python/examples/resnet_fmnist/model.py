"""A small ResNet with BatchNorm for 1x28x28 images (Fashion-MNIST), for asgdsim.

make() is the factory asgdsim calls (model.module "model.py:make"): it must return a
module with all its parameters (no lazy layers). asgdsim seeds torch before calling it,
so every seed starts from its own initial parameters.
"""
import torch
from torch import nn


class Block(nn.Module):
    """Basic residual block: conv-BN-ReLU-conv-BN plus a (projected) shortcut."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.short(x))


class ResNet(nn.Module):
    """A stem (3x3 conv with stride 2, BN, ReLU: 28 -> 14), one basic block per stage
    (width, 2*width, 4*width channels; strides 1, 2, 2: 14 -> 7 -> 4), global average
    pooling, a linear classifier. width 8: 19,810 parameters, about 10-20 ms a gradient of
    32 images on one core."""

    def __init__(self, width=8, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.stages = nn.Sequential(Block(width, width, 1), Block(width, 2 * width, 2),
                                    Block(2 * width, 4 * width, 2))
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def make(width=8):
    return ResNet(width)
